"""Follow-up model calls (memory extraction, summary folds) ask the provider for one JSON
answer, not a stream: nobody reads them as they are written, and a streamed answer costs the
process a parse, a pydantic object and a LangChain chunk per token (against the fake provider,
5.5 ms of CPU a call streamed, 2.0 ms not). The chat call still streams. Seen through the real
client, on the fake OpenAI-compatible provider over loopback HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from tests.support.fake_openai import FakeProvider, fake_chat_model, provider_in_env
from threadkeeper.app.container import summarizer_for, unstreamed
from threadkeeper.app.memory import ModelExtractor
from threadkeeper.domain.extraction import RoundText
from threadkeeper.domain.memory import MemoryRules
from threadkeeper.domain.tokens import CharacterCounter


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProvider]:
    with provider_in_env(monkeypatch) as running:
        yield running


async def test_extraction_and_folds_are_asked_for_one_answer_the_chat_call_a_stream(
    provider: FakeProvider,
) -> None:
    model = fake_chat_model()
    at = datetime(2026, 12, 7, tzinfo=UTC)
    await ModelExtractor(unstreamed(model)).plan(
        RoundText("t-1", "m-1", "Is dental covered?", "Yes.", at), [], MemoryRules()
    )
    summarizer = summarizer_for("openai:fake-model", model, CharacterCounter())
    await summarizer.summarize(
        None, [HumanMessage("Is dental covered?"), AIMessage("Yes.")], max_tokens=200
    )
    await model.ainvoke([HumanMessage("Is dental covered?")])
    bodies = await asyncio.to_thread(provider.wait_for_requests, 3)
    assert [bool(body.get("stream")) for body in bodies] == [False, False, True]


def test_unstreamed_shares_the_client_and_leaves_the_chat_model_streaming(
    provider: FakeProvider,
) -> None:
    model = fake_chat_model()
    copy = unstreamed(model)
    assert copy.streaming is False  # type: ignore[attr-defined]
    assert model.streaming is True  # type: ignore[attr-defined]
    assert copy.async_client is model.async_client  # type: ignore[attr-defined]
