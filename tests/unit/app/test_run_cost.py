"""Work a run need not do (issue 12, from the py-spy profile in docs/benchmarks.md):

- a JSON run asks the graph for no token stream, so the model answers in one message — and the
  same answer is stored as when the deltas are streamed;
- LangSmith's thread hop around every middleware call is taken only when LangSmith traces;
- a checkpoint's messages are decoded once per process (``adapters.serde.MessageMemo``), and
  what is decoded again equals what was stored.
"""

from __future__ import annotations

import contextvars
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import langsmith
import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.outputs import ChatGenerationChunk
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langsmith import _runtime_overrides
from langsmith._internal import _aiter
from pydantic import PrivateAttr

from tests.support.scripted_model import ScriptedChatModel
from threadkeeper.adapters.knowledge import KnowledgeBase
from threadkeeper.adapters.serde import (
    MemoSerializer,
    MessageMemo,
    StoredTypesHook,
    checkpoint_serializer,
)
from threadkeeper.app.config import Settings
from threadkeeper.app.container import build_service
from threadkeeper.app.runs import RunService
from threadkeeper.app.service import Caller, RunMessage, RunRequest
from threadkeeper.app.telemetry import _inline_unless_traced, untraced_langsmith_inline
from threadkeeper.conformance.in_memory import InMemoryBackend
from threadkeeper.domain.estimate import EstimatingCounter

CALLER = Caller(tenant_id="acme-insurance", user_id="user-1")
QUESTION = "Are fillings covered by dental insurance?"
ANSWER = "Dental cover pays for fillings at 80 percent."


class CountingModel(ScriptedChatModel):
    """Records whether each call was streamed (``_astream``) or answered whole."""

    _calls: list[str] = PrivateAttr(default_factory=list)

    async def _astream(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self._calls.append("stream")
        reply = self._generate(messages).generations[0].message
        for word in str(reply.content).split(" "):
            yield ChatGenerationChunk(message=_chunk(word + " "))

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self._calls.append("whole")
        return self._generate(messages, *args, **kwargs)


def _chunk(text: str) -> AIMessageChunk:
    return AIMessageChunk(content=text)


def service_with(model: Any, profile: str) -> RunService:
    return build_service(
        settings=Settings.of(profile=profile, model_max_retries=0),
        backend=InMemoryBackend(),
        counter=EstimatingCounter(),
        knowledge=KnowledgeBase.from_directory(),
        model=model,
    )


async def answer(service: RunService, deltas: bool) -> tuple[str, list[str]]:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    handle = await service.start_run(
        CALLER, thread, RunRequest(RunMessage(QUESTION), deltas=deltas)
    )
    deltas_seen = [
        e.data["delta"]
        async for e in handle.events()
        if e.event == "messages" and isinstance(e.data, dict)
    ]
    result = await handle.result()
    await service.wait_idle()
    stored = await service.threads.transcript(CALLER, thread)
    assert [m.content for m in stored] == [QUESTION, result.message.content]
    return result.message.content, deltas_seen


async def test_a_json_run_is_answered_whole_and_stored_as_a_streamed_one(
    memory_profile: str,
) -> None:
    model = CountingModel(default=ANSWER)
    service = service_with(model, memory_profile)
    streamed, deltas = await answer(service, deltas=True)
    whole, none = await answer(service, deltas=False)
    await service.wait_idle()
    assert model._calls == ["stream", "whole"]
    assert "".join(deltas).strip() == streamed.strip()
    assert len(deltas) > 1
    assert none == []
    assert whole.strip() == streamed.strip()


def test_a_configured_provider_streams_even_for_a_json_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``streaming=True``: the provider's stream (and so its hang and cut detection) is the
    same whether or not the caller reads the deltas."""
    pytest.importorskip("langchain_openai")
    from threadkeeper.app.container import build_model

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    model = build_model("openai:gpt-4o-mini", 0.0, 5.0)
    assert getattr(model, "streaming", None) is True


# --- LangSmith's thread hop -------------------------------------------------------------------


@pytest.fixture
def restore_overrides() -> Iterator[None]:
    before = _runtime_overrides._runtime_overrides.aio_to_thread
    yield
    langsmith.set_runtime_overrides(aio_to_thread=before)


async def test_untraced_setup_runs_inline_in_the_given_context(
    restore_overrides: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LANGSMITH_TRACING", raising=False)
    monkeypatch.delenv("LANGCHAIN_TRACING_V2", raising=False)
    untraced_langsmith_inline()
    assert _runtime_overrides._runtime_overrides.aio_to_thread is _inline_unless_traced
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="outer")
    ctx = contextvars.copy_context()
    ctx.run(marker.set, "given")

    def where() -> tuple[str, str]:
        return threading.current_thread().name, marker.get()

    assert await _aiter.aio_to_thread(ctx, where) == (threading.current_thread().name, "given")


async def test_traced_setup_keeps_langsmiths_thread(restore_overrides: None) -> None:
    untraced_langsmith_inline()
    with langsmith.tracing_context(enabled=True):
        traced = contextvars.copy_context()
    name = await _aiter.aio_to_thread(traced, lambda: threading.current_thread().name)
    assert name != threading.current_thread().name


# --- decoded messages -------------------------------------------------------------------------


def _history() -> list[BaseMessage]:
    return [
        HumanMessage("Is my car covered abroad? " * 3, id="h1"),
        AIMessage(
            "",
            id="a1",
            tool_calls=[{"name": "fetch_faq_document", "args": {"doc_id": "d7"}, "id": "c1"}],
        ),
        ToolMessage("Cover abroad: the EU and Switzerland. " * 5, tool_call_id="c1", id="t1"),
        AIMessage(
            "Yes, in the EU.",
            id="a2",
            additional_kwargs={"threadkeeper": {"status": "answered", "citations": ["x#1"]}},
            response_metadata={"threadkeeper": {"at": "2026-12-01T10:00:00+00:00"}},
        ),
    ]


def _sql_serializers() -> tuple[Any, Any]:
    serde = checkpoint_serializer()
    assert serde._unpack_ext_hook is serde.memo  # the memo decodes for ormsgpack
    return serde, JsonPlusSerializer()


def _redis_serializers() -> tuple[Any, Any]:
    from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer

    from threadkeeper.adapters.redis_mysql.serde import MemoRedisSerializer

    return MemoRedisSerializer(), JsonPlusRedisSerializer()


@pytest.mark.parametrize(
    ("serializers", "kind"),
    [(_sql_serializers, "msgpack"), (_redis_serializers, "json")],
    ids=["sql", "redis"],
)
def test_a_memoized_decode_equals_a_fresh_one_and_notices_an_assigned_field(
    serializers: Callable[[], tuple[Any, Any]], kind: str
) -> None:
    """The SQL profiles' msgpack memo and redis-mysql's RedisJSON envelope memo alike."""
    serde, plain = serializers()
    blob = plain.dumps_typed({"messages": _history(), "n": 3})
    assert blob[0] == kind
    first = serde.loads_typed(blob)
    second = serde.loads_typed(blob)
    fresh = plain.loads_typed(blob)
    assert first == second == fresh == {"messages": _history(), "n": 3}
    assert [type(m) for m in second["messages"]] == [type(m) for m in fresh["messages"]]
    assert isinstance(serde.memo, MessageMemo)
    assert serde.memo.hits == len(_history())
    assert first["messages"][0] is second["messages"][0], "handed out again, not copied"
    second["messages"][3].content = "changed by a caller"
    third = serde.loads_typed(blob)
    assert third["messages"][3].content == "Yes, in the EU.", "decoded again"
    assert third == fresh


def test_the_memo_is_bounded_by_the_bytes_it_keeps() -> None:
    memo = MessageMemo(StoredTypesHook(), budget=2_000)
    bounded = MemoSerializer(memo)
    for i in range(50):
        blob = bounded.dumps_typed([HumanMessage(f"message {i} " * 10, id=f"m{i}")])
        assert bounded.loads_typed(blob)[0].content == f"message {i} " * 10
    assert 0 < len(memo) < 50


async def test_a_thread_read_back_through_the_memo_is_what_was_stored(tmp_path: Path) -> None:
    """The embedded profile's saver decodes through the memo and returns, on every later read
    of a checkpoint, exactly the messages written."""
    from threadkeeper.adapters.embedded import PROFILE
    from threadkeeper.adapters.embedded.settings import EmbeddedSettings

    async with PROFILE.open(EmbeddedSettings(data_dir=str(tmp_path))) as backend:
        saver = backend.saver
        assert isinstance(saver.serde._unpack_ext_hook, MessageMemo)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": _history()}
        checkpoint["channel_versions"] = {"messages": 1}
        config: Any = {"configurable": {"thread_id": "memo", "checkpoint_ns": ""}}
        saved = await saver.aput(config, checkpoint, {}, {"messages": 1})
        reads = [await saver.aget_tuple(saved) for _ in range(3)]
    for read in reads:
        assert read is not None
        assert read.checkpoint["channel_values"]["messages"] == _history()


def test_an_unchanged_history_is_written_as_the_bytes_it_was_read_from() -> None:
    serde = checkpoint_serializer()
    plain = JsonPlusSerializer()
    blob = plain.dumps_typed({"messages": _history()})
    read = serde.loads_typed(blob)
    again = serde.dumps_typed(read)
    assert serde.memo.reused == len(_history())
    assert again == blob, "the same bytes, message by message"
    assert plain.loads_typed(again) == {"messages": _history()}

    read["messages"][3].content = "Corrected: in the EU and Switzerland."
    changed = serde.dumps_typed(read)
    assert plain.loads_typed(changed)["messages"][3].content == (
        "Corrected: in the EU and Switzerland."
    )
    assert plain.loads_typed(changed)["messages"][:3] == _history()[:3]


def test_a_new_message_beside_read_ones_is_encoded_as_langgraph_does() -> None:
    serde = checkpoint_serializer()
    plain = JsonPlusSerializer()
    read = serde.loads_typed(plain.dumps_typed(_history()))
    new = AIMessage("A new answer.", id="a3")
    assert serde.dumps_typed([*read, new]) == plain.dumps_typed([*_history(), new])


# --- decoded messages, redis-mysql (RedisJSON envelopes) ---------------------------------------


def test_an_unchanged_redis_history_is_written_as_the_json_it_was_read_from() -> None:
    from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer

    from threadkeeper.adapters.redis_mysql.serde import MemoRedisSerializer

    serde, plain = MemoRedisSerializer(), JsonPlusRedisSerializer()
    blob = plain.dumps_typed({"messages": _history()})
    read = serde.loads_typed(blob)
    again = serde.dumps_typed(read)
    assert serde.memo.reused == len(_history())
    assert again == blob, "the same JSON, envelope by envelope"
    new = AIMessage("A new answer.", id="a3")
    assert serde.dumps_typed([*read["messages"], new]) == plain.dumps_typed([*_history(), new])

    read["messages"][3].content = "Corrected: in the EU and Switzerland."
    changed = plain.loads_typed(serde.dumps_typed(read))
    assert changed["messages"][3].content == "Corrected: in the EU and Switzerland."
    assert changed["messages"][:3] == _history()[:3]
