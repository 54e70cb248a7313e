"""The fake OpenAI provider, seen through the real client (langchain-openai over loopback HTTP).

The integration and e2e suites trust the fake in place of a paid model, so these pin what they
rely on: JSON and streamed answers, the usage chunk only when asked for, tool-call round trips
(JSON and streamed deltas), citations threadkeeper parses, and each fault mode as the client
sees it — a status error, a timeout, a broken stream, a retry that succeeds.
"""

from __future__ import annotations

import functools
import operator
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import openai
import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
)
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.support.fake_openai import (
    FakeProvider,
    ToolCall,
    default_answer,
    fake_provider,
    split_tokens,
)
from threadkeeper.app.agent import stamp_for
from threadkeeper.domain.prompt import render_documents

DEADLINE = 10.0
"""Seconds a faulty request may take to fail: generous, only there to catch a real hang."""


@pytest.fixture
def provider() -> Iterator[FakeProvider]:
    with fake_provider(retry_after_ms=1) as started:
        yield started


def chat(provider: FakeProvider, **options: Any) -> ChatOpenAI:
    settings: dict[str, Any] = {
        "base_url": provider.url,
        "api_key": "test",
        "model": "fake-model",
        "max_retries": 0,
        "timeout": 5,
    }
    return ChatOpenAI(**(settings | options))


def texts(chunks: Sequence[BaseMessage]) -> list[str]:
    return [chunk.text for chunk in chunks if chunk.text]


def collect(chunks: Iterator[BaseMessage], into: list[str]) -> None:
    """Append each chunk's text to ``into`` as it arrives (kept when the stream breaks)."""
    into.extend(chunk.text for chunk in chunks)


def ai_chunks(chunks: Iterator[BaseMessage]) -> list[AIMessageChunk]:
    received = list(chunks)
    assert all(isinstance(chunk, AIMessageChunk) for chunk in received)
    return [chunk for chunk in received if isinstance(chunk, AIMessageChunk)]


def merged(chunks: Sequence[AIMessageChunk]) -> AIMessageChunk:
    return functools.reduce(operator.add, chunks)


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"18 degrees in {city}"


def test_invoke_answers_with_a_json_completion(provider: FakeProvider) -> None:
    reply = chat(provider).invoke("What is the refund policy for damaged goods?")

    assert reply.text == "Answer: What is the refund policy for damaged goods."
    assert reply.text == default_answer(provider.requests[0])
    assert reply.response_metadata["finish_reason"] == "stop"
    assert reply.response_metadata["model_name"] == "fake-model"
    assert isinstance(reply, AIMessage)
    assert reply.usage_metadata is not None
    assert reply.usage_metadata["output_tokens"] == len(split_tokens(reply.text))
    assert provider.requests[0]["messages"] == [
        {"role": "user", "content": "What is the refund policy for damaged goods?"}
    ]
    assert provider.modes == ["ok"]


def test_stream_sends_the_answer_token_by_token(provider: FakeProvider) -> None:
    provider.answer = lambda body: "one two  three, four"

    chunks = list(chat(provider).stream("count"))

    assert texts(chunks) == ["one", " two", "  three,", " four"]
    assert "".join(texts(chunks)) == "one two  three, four"
    assert merged(chunks).response_metadata["finish_reason"] == "stop"
    assert provider.requests[0]["stream"] is True


def test_usage_is_streamed_only_when_asked_for(provider: FakeProvider) -> None:
    plain = list(chat(provider).stream("hello there"))
    counted = list(chat(provider, stream_usage=True).stream("hello there"))

    assert "stream_options" not in provider.requests[0]
    assert all(chunk.usage_metadata is None for chunk in plain)
    assert provider.requests[1]["stream_options"] == {"include_usage": True}
    usage = merged(counted).usage_metadata
    assert usage is not None
    assert usage["output_tokens"] == len(split_tokens("Answer: hello there."))
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


async def test_async_stream_matches_the_answer(provider: FakeProvider) -> None:
    chunks = [chunk async for chunk in chat(provider).astream("async question")]

    assert "".join(texts(chunks)) == "Answer: async question."


def test_answer_cites_the_documents_threadkeeper_parses(provider: FakeProvider) -> None:
    chunks = [
        {"chunk_id": "returns#0", "doc_id": "returns", "title": "Returns", "text": "30 days."},
        {"chunk_id": "returns#1", "doc_id": "returns", "title": "Returns", "text": "Receipt."},
    ]
    system = SystemMessage(f"Cite as [chunk_id].\n\n{render_documents(chunks)}")

    reply = chat(provider).invoke([system, HumanMessage("How long do I have?")])

    assert reply.text == "Answer: How long do I have. [returns#0] [returns#1]"
    assert [c["chunk_id"] for c in stamp_for(reply, chunks).citations] == [
        "returns#0",
        "returns#1",
    ]


def test_tool_call_round_trip(provider: FakeProvider) -> None:
    provider.script(ToolCall("get_weather", {"city": "Paris"}, id="call_1"))
    model = chat(provider).bind_tools([get_weather])
    question = HumanMessage("Weather in Paris?")

    call = model.invoke([question])
    assert isinstance(call, AIMessage)
    assert call.tool_calls == [
        {"name": "get_weather", "args": {"city": "Paris"}, "id": "call_1", "type": "tool_call"}
    ]
    assert call.response_metadata["finish_reason"] == "tool_calls"
    result = get_weather.invoke(call.tool_calls[0])
    answer = model.invoke([question, call, result])

    assert answer.text == "Answer: Weather in Paris. Tool result: 18 degrees in Paris."
    assert provider.requests[1]["messages"][-1] == {
        "role": "tool",
        "content": "18 degrees in Paris",
        "tool_call_id": "call_1",
    }


def test_streamed_tool_call_arrives_as_deltas(provider: FakeProvider) -> None:
    provider.script(ToolCall("get_weather", {"city": "Paris"}))
    model = chat(provider).bind_tools([get_weather])

    chunks = ai_chunks(model.stream("Weather in Paris?"))
    call = merged(chunks)

    assert [c["name"] for c in call.tool_calls] == ["get_weather"]
    assert call.tool_calls[0]["args"] == {"city": "Paris"}
    assert str(call.tool_calls[0]["id"]).startswith("call_")
    assert sum(1 for chunk in chunks if chunk.tool_call_chunks) > 2  # the arguments in pieces
    assert call.response_metadata["finish_reason"] == "tool_calls"
    assert "".join(texts(chunks)) == ""
    assert model.invoke("Weather in Paris?").text == "Answer: Weather in Paris."


def test_scripted_tool_call_waits_for_a_request_offering_the_tool(
    provider: FakeProvider,
) -> None:
    provider.script(ToolCall("get_weather", {"city": "Paris"}))

    assert chat(provider).invoke("no tools here").text == "Answer: no tools here."
    reply = chat(provider).bind_tools([get_weather]).invoke("Weather?")

    assert isinstance(reply, AIMessage)
    assert [c["name"] for c in reply.tool_calls] == ["get_weather"]


def test_error_500_raises_internal_server_error_once(provider: FakeProvider) -> None:
    provider.mode = "error_500"

    with pytest.raises(openai.InternalServerError) as raised:
        chat(provider).invoke("hello")

    assert raised.value.status_code == 500
    assert raised.value.body == {
        "message": "The server had an error while processing your request. Sorry about that!",
        "type": "server_error",
        "param": None,
        "code": None,
    }
    assert provider.count("error_500") == 1  # max_retries=0: the client did not retry


def test_fail_once_then_succeed_through_the_client_retry(provider: FakeProvider) -> None:
    provider.set_mode("error_500", times=1)

    reply = chat(provider, max_retries=1).invoke("hello")

    assert reply.text == "Answer: hello."
    assert provider.modes == ["error_500", "ok"]
    assert [h["x-stainless-retry-count"] for h in provider.headers] == ["0", "1"]


def test_fail_once_then_succeed_for_a_caller_that_retries(provider: FakeProvider) -> None:
    provider.set_mode("cut", times=1)
    model = chat(provider)

    with pytest.raises(openai.APIConnectionError):
        list(model.stream("hello"))
    assert "".join(texts(list(model.stream("hello")))) == "Answer: hello."
    assert provider.modes == ["cut", "ok"]
    assert provider.count() == 2


def test_mode_for_fails_one_kind_of_request_and_leaves_queued_modes(
    provider: FakeProvider,
) -> None:
    provider.mode_for = lambda body: "error_500" if body["model"] == "extractor" else None
    provider.set_mode("cut", times=1)

    with pytest.raises(openai.InternalServerError):
        chat(provider, model="extractor").invoke("hello")
    with pytest.raises(openai.APIConnectionError):
        chat(provider).invoke("hello")  # the queued mode, untouched by the chosen one
    assert chat(provider).invoke("hello").text == "Answer: hello."
    assert provider.modes == ["error_500", "cut", "ok"]


def test_hang_makes_the_client_time_out(provider: FakeProvider) -> None:
    provider.mode = "hang"
    started = time.monotonic()

    with pytest.raises(openai.APITimeoutError):
        chat(provider, timeout=1).invoke("hello")

    assert time.monotonic() - started < DEADLINE
    assert provider.count("hang") == 1


def test_hang_after_stalls_the_stream_mid_way(provider: FakeProvider) -> None:
    provider.mode = "hang_after"
    received: list[str] = []

    with pytest.raises(openai.APITimeoutError):
        collect(chat(provider, timeout=1).stream("one two three"), received)

    assert received == ["", "Answer:"]  # after_chunks=2: the role chunk and one token


def test_cut_breaks_the_stream(provider: FakeProvider) -> None:
    provider.mode = "cut"
    received: list[str] = []

    with pytest.raises(openai.APIConnectionError):
        collect(chat(provider).stream("one two three"), received)

    assert received == ["", "Answer:"]
    assert provider.count("cut") == 1
    assert provider.requests[0]["messages"][0]["content"] == "one two three"


def test_cut_breaks_a_json_response_too(provider: FakeProvider) -> None:
    provider.mode = "cut"

    with pytest.raises(openai.APIConnectionError):
        chat(provider).invoke("hello")

    assert provider.count("cut") == 1


def test_slow_trickles_every_chunk(provider: FakeProvider) -> None:
    provider.mode = "slow"
    provider.delay = 0.05
    started = time.monotonic()

    chunks = list(chat(provider).stream("one two three"))

    assert "".join(texts(chunks)) == "Answer: one two three."
    frames = 1 + len(split_tokens("Answer: one two three.")) + 2  # role, tokens, finish, DONE
    assert time.monotonic() - started >= 0.8 * frames * 0.05


def test_first_byte_delay_holds_back_every_response() -> None:
    with fake_provider(first_byte_delay=0.2) as provider:
        model = chat(provider)
        for call in (
            lambda: model.invoke("json"),
            lambda: next(iter(model.stream("streamed"))),  # the first chunk only
        ):
            started = time.monotonic()
            call()
            assert time.monotonic() - started >= 0.2
        provider.first_byte_delay = 0.0
        started = time.monotonic()
        model.invoke("at once")
        assert time.monotonic() - started < 0.2
    assert provider.count() == 3


def test_stop_releases_a_hanging_request() -> None:
    outcome: list[BaseException] = []

    with fake_provider(mode="hang") as provider:

        def call() -> None:
            try:
                chat(provider, timeout=30).invoke("hello")
            except openai.APIError as exc:
                outcome.append(exc)

        caller = threading.Thread(target=call)
        caller.start()
        provider.wait_for_requests(1)
    caller.join(timeout=DEADLINE)

    assert not caller.is_alive()
    assert isinstance(outcome[0], openai.InternalServerError)
    assert outcome[0].status_code == 503


def test_release_lets_held_requests_go_on(provider: FakeProvider) -> None:
    provider.set_mode("hang_after")
    received: list[str] = []

    def call() -> None:
        try:
            collect(chat(provider, timeout=30).stream("hello"), received)
        except openai.APIConnectionError:
            received.append("<cut>")

    caller = threading.Thread(target=call)
    caller.start()
    provider.wait_for_requests(1)
    provider.reset()
    caller.join(timeout=DEADLINE)

    assert not caller.is_alive()
    assert received == ["", "Answer:", "<cut>"]
    assert provider.mode == "ok"
    assert provider.count() == 0


def test_unknown_mode_is_refused(provider: FakeProvider) -> None:
    with pytest.raises(ValueError, match="unknown mode"):
        provider.set_mode("flaky")  # type: ignore[arg-type]


def test_its_connections_send_without_delay(provider: FakeProvider) -> None:
    """The fake's socket says it is TCP, so asyncio sets TCP_NODELAY on every connection it
    accepts. It did not: each streamed answer's body waited ~40 ms for the client's delayed
    ACK (Nagle), and every model call of the benchmarks — chat, memory extraction, summary —
    carried a stall no real provider makes (the follow-up latency benchmark's turns, 0.2 s of
    provider delay, had ~0.2 × D of it)."""
    import socket

    import httpx

    with httpx.Client(base_url=provider.url, timeout=DEADLINE) as client:
        body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
        assert client.post("/chat/completions", json=body).status_code == 200
        server = provider._server
        assert server is not None
        sockets = [
            connection.transport.get_extra_info("socket")
            for connection in server.server_state.connections
        ]
        assert sockets, "the kept-alive connection is open"
        for sock in sockets:
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
