"""The OpenAI client wrapped by ``adapters.openai_requests`` sends the same request as the SDK's
own path — only the SDK's per-message transform is skipped. Seen through the real client
(LangChain's ``ChatOpenAI``) on the fake OpenAI-compatible provider over loopback HTTP, which
records each request's JSON body: the bodies of a plain and a wrapped model are compared, for
streamed and JSON calls, over every kind of message a run sends."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from tests.support.fake_openai import FakeProvider, fake_chat_model, provider_in_env
from threadkeeper.adapters.openai_requests import (
    UntransformedCompletions,
    send_messages_as_given,
    untransformed,
)

MESSAGES: list[BaseMessage] = [
    SystemMessage("You answer questions about insurance. Facts: the user has two children."),
    HumanMessage("Is dental covered?", name="sara"),
    AIMessage(
        "",
        tool_calls=[{"name": "fetch_faq_document", "args": {"doc_id": "dental"}, "id": "c1"}],
    ),
    ToolMessage('{"text": "Dental: 80 % after 6 months"}', tool_call_id="c1"),
    AIMessage("Yes: 80 % after a six-month wait [dental#1]."),
    HumanMessage(
        [
            {"type": "text", "text": "And this bill? پوشش دندان؟ 牙科保险？"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        ]
    ),
]


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    with provider_in_env(monkeypatch) as running:
        yield running


async def bodies(provider: FakeProvider, model: Any, count: int) -> list[dict[str, Any]]:
    provider.reset()
    await model.ainvoke(MESSAGES)
    return await asyncio.to_thread(provider.wait_for_requests, count)


@pytest.mark.parametrize("streamed", [True, False], ids=["streamed", "json"])
async def test_the_wrapped_client_sends_the_request_the_sdk_sends(
    provider: FakeProvider, streamed: bool
) -> None:
    plain = fake_chat_model(streaming=streamed)
    wrapped = send_messages_as_given(fake_chat_model(streaming=streamed))
    assert isinstance(wrapped.async_client, UntransformedCompletions)
    [sent] = await bodies(provider, plain, 1)
    [sent_wrapped] = await bodies(provider, wrapped, 1)
    assert sent_wrapped == sent
    assert len(sent["messages"]) == len(MESSAGES)
    assert bool(sent.get("stream")) is streamed


def test_messages_move_to_the_extra_body_unless_it_names_them() -> None:
    params = {"model": "m", "messages": ({"role": "user", "content": "hi"},), "stream": True}
    moved = untransformed(params)
    assert moved["messages"] == []
    assert moved["extra_body"] == {"messages": [{"role": "user", "content": "hi"}]}
    assert moved["stream"] is True
    given = {**params, "extra_body": {"messages": ["theirs"]}}
    assert untransformed(given) == given, "the caller's extra_body is left alone"
    assert untransformed({"model": "m"}) == {"model": "m"}


def test_a_model_without_an_openai_client_is_left_alone() -> None:
    from threadkeeper.adapters.builtin_model import BuiltinChatModel

    model = BuiltinChatModel()
    assert send_messages_as_given(model) is model


def test_the_models_threadkeeper_builds_send_their_messages_as_given(
    provider: FakeProvider,
) -> None:
    """``build_model`` wraps an OpenAI model's client, and the copy follow-up calls use keeps
    it: without it every chat call spent a third of its CPU in the SDK's transform."""
    assert isinstance(fake_chat_model().async_client, UntransformedCompletions)
    assert isinstance(fake_chat_model(streaming=False).async_client, UntransformedCompletions)
