"""Replay rebuilds, byte for byte, what the model received — now that a run record names its
windows as ranges of the thread's order and its summary by digest (``domain.compact``,
``tk_run_texts``).

A scripted model records every input. Runs are made before and after the rolling summary
changes (``summarize`` with a small budget: a new version nearly every turn), with tool calls
(a truncated tool result the model saw under a new id), and on redis-mysql after compaction
(``compact`` rewrites the state, the archive keeps the order). Every run of the thread is then
replayed through ``StoredThreads.replay`` and the CLI's rendering and compared with the
model's inputs; a record in the shape written before (every id listed, texts inline) is
replayed too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage
from sqlalchemy import select, update

from tests.support.mysql import fresh_database
from tests.support.postgres import fresh_schema
from tests.support.scripted_model import ScriptedChatModel
from threadkeeper.adapters.knowledge import KnowledgeBase
from threadkeeper.adapters.sql import run_records, run_texts
from threadkeeper.app.cli import replay as cli_replay
from threadkeeper.app.config import Settings
from threadkeeper.app.container import build_service
from threadkeeper.app.service import Caller, RunMessage, RunRequest
from threadkeeper.app.stored import StoredThreads
from threadkeeper.domain.estimate import EstimatingCounter
from threadkeeper.domain.threads import ThreadRef

pytestmark = pytest.mark.integration

CALLER = Caller("acme-insurance", "replayed-user")
QUESTIONS = [
    "Is dental treatment covered by my supplementary plan?",
    "How do I file a claim for a hospital stay?",
    "بیمه تکمیلی من هزینه بستری را پوشش می‌دهد؟",
    "我的医疗保险包括牙科治疗吗？",
    "What is the waiting period for maternity cover?",
    "Can I add my spouse to my health insurance?",
]


@pytest.fixture(params=["embedded", "postgres", "redis-mysql"])
def servers(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, str]]]:
    """The profile and its servers' URLs (private schema, database; created before the test's
    event loop runs: their migrations run their own)."""
    profile = str(request.param)
    if profile == "postgres":
        with fresh_schema() as url:
            yield profile, {"postgres_url": url}
    elif profile == "redis-mysql":
        redis_url = request.getfixturevalue("redis_server").url
        with fresh_database() as url:
            yield profile, {"redis_url": redis_url, "mysql_url": url}
    else:
        yield profile, {}


def settings_of(profile: str, tmp_path: Path, **servers: str) -> Settings:
    common: dict[str, Any] = {"summary_after_turns": 2, "token_budget": 1400}
    if profile == "redis-mysql":
        common["hooks"] = "truncate_tool_results,summarize,compact"
        common["tool_result_max_chars"] = 300
        return Settings.of(
            profile=profile, service_token="t", data_dir=str(tmp_path), **servers, **common
        )
    common["tool_result_max_chars"] = 300
    if profile == "postgres":
        return Settings.of(profile=profile, service_token="t", **servers, **common)
    return Settings.of(profile=profile, data_dir=str(tmp_path / "data"), **common)


@asynccontextmanager
async def backend_of(profile: str, tmp_path: Path, urls: dict[str, str]) -> AsyncIterator[Any]:
    settings = settings_of(profile, tmp_path, **urls)
    if profile == "embedded":
        from threadkeeper.adapters.embedded.backend import open_embedded

        async with open_embedded(tmp_path / "data") as backend:
            yield backend, settings
    elif profile == "postgres":
        from threadkeeper.adapters.postgres import open_postgres

        async with open_postgres(urls["postgres_url"]) as backend:
            yield backend, settings
    else:
        from threadkeeper.adapters.redis_mysql import open_redis_mysql

        async with open_redis_mysql(urls["redis_url"], urls["mysql_url"]) as backend:
            yield backend, settings


def answer(turn: int) -> Callable[[list[BaseMessage]], AIMessage]:
    def reply(messages: list[BaseMessage]) -> AIMessage:
        return AIMessage(
            f"Answer {turn}. Your plan covers it within its limits; see the policy terms. "
            + "بله، پوشش داده می‌شود. 是的，在限额内。" * 3
        )

    return reply


def tool_call(turn: int) -> AIMessage:
    return AIMessage(
        "",
        tool_calls=[
            {"name": "fetch_faq_document", "args": {"doc_id": "dental-cover.en"}, "id": f"c{turn}"}
        ],
    )


def rendered(record: Any, by_id: dict[str, Any]) -> list[dict[str, Any]]:
    """The CLI's replay of a run: one JSON object per model call."""
    return [json.loads(line) for line in list(cli_replay._replay_lines(record, by_id))[1:]]


def received(call: list[BaseMessage]) -> list[tuple[str, str | None, str]]:
    """What one model call was sent, as (role, id, content) — the system message first."""
    out: list[tuple[str, str | None, str]] = []
    for message in call:
        role = "system" if isinstance(message, SystemMessage) else message.type
        ident = None if isinstance(message, SystemMessage) else message.id
        out.append((role, ident, str(message.content)))
    return out


def replayed(call: dict[str, Any]) -> list[tuple[str, str | None, str]]:
    return [(m["role"], m.get("id"), str(m.get("content"))) for m in call["messages"]]


def replayed_calls(calls: list[dict[str, Any]]) -> list[list[tuple[str, str | None, str]]]:
    return [replayed(c) for c in calls]


async def test_every_run_replays_what_the_model_received(
    servers: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    profile, urls = servers
    model = ScriptedChatModel()
    thread = f"exact-{uuid.uuid4().hex[:8]}"
    inputs: dict[str, list[list[BaseMessage]]] = {}
    async with backend_of(profile, tmp_path, urls) as (backend, settings):
        service = build_service(
            settings=settings,
            backend=backend,
            counter=EstimatingCounter(),
            knowledge=KnowledgeBase.from_directory(),
            model=model,
        )
        for turn in range(14):
            model.script = [tool_call(turn), answer(turn)] if turn % 3 == 1 else [answer(turn)]
            before = len(model.calls)
            question = f"{QUESTIONS[turn % len(QUESTIONS)]} (turn {turn})"
            handle = await service.start_run(CALLER, thread, RunRequest(RunMessage(question)))
            result = await handle.result()
            inputs[result.run_id] = model.calls[before:]
        await service.wait_idle()

        stored = StoredThreads(backend)
        key = ThreadRef(CALLER.tenant_id, CALLER.user_id, thread).key
        summaries: set[str] = set()
        order = await backend.transcript.message_order(key)
        missing = 0
        for run_id, calls in inputs.items():
            replay = await stored.replay(CALLER, thread, run_id)
            assert replay is not None
            shown = rendered(replay.record, replay.messages)
            got = [replayed(c) for c in shown]
            sent = [received(c) for c in calls]
            if not settings.history_in_checkpoints:
                # tool steps compaction removed from Redis are not archived: replay names them
                # (the ids are exact) and says they are missing — as before compact records
                assert [[m[1] for m in c] for c in got] == [[m[1] for m in c] for c in sent]
                steps = {m[1] for c in sent for m in c if m[0] in ("tool", "ai")} - set(order)
                got = [
                    [
                        s if g[0] == "missing" and g[1] in steps else g
                        for g, s in zip(gc, sc, strict=True)
                    ]
                    for gc, sc in zip(got, sent, strict=True)
                ]
                missing += sum(g[0] == "missing" for c in replayed_calls(shown) for g in c)
            assert got == sent, run_id
            summaries |= {c.summary or "" for c in replay.record.model_calls}
            raw = await backend.runs.get(key, run_id)
            assert raw is not None
            assert all(c.window is not None for c in raw.model_calls), "written compact"
        assert len(summaries) > 4, "the summary changed between the runs replayed"
        sent = [received(c) for calls in inputs.values() for c in calls]
        assert any(m[0] == "tool" for call in sent for m in call), "tool results were shown"
        assert sum("Summary of the earlier conversation" in call[0][2] for call in sent) > 4
        if not settings.history_in_checkpoints:
            first = next(iter(inputs))
            record = await backend.runs.get(key, first)
            assert record is not None
            assert missing, "compaction removed tool steps of early runs"
            state = await backend.saver.aget_tuple({"configurable": {"thread_id": key}})
            kept = {str(m.id) for m in state.checkpoint["channel_values"]["messages"]}
            assert str(record.human_message_id) not in kept, "compaction removed the first run"
            assert str(record.human_message_id) in order

        # a record written before windows and texts were compact replays the same
        old_run = list(inputs)[5]
        record = await backend.runs.get(key, old_run)
        assert record is not None
        replay = await stored.replay(CALLER, thread, old_run)
        assert replay is not None
        listed = msgspec.structs.replace(
            record,
            model_calls=tuple(
                msgspec.structs.replace(c, window=None, message_ids=d.message_ids)
                for c, d in zip(record.model_calls, replay.record.model_calls, strict=True)
            ),
        )
        legacy = msgspec.json.encode(listed)  # the RunRecord itself, as it used to be stored
        assert legacy.startswith(b"{")
        assert b'"message_ids":["' in legacy
        async with backend.runs.begin() as conn:
            await conn.execute(
                update(run_records)
                .where(run_records.c.thread_key == key, run_records.c.run_id == old_run)
                .values(record=legacy)
            )
        again = await stored.replay(CALLER, thread, old_run)
        assert again is not None
        assert again.record == replay.record
        assert rendered(again.record, again.messages) == rendered(replay.record, replay.messages)

        # deleting the thread deletes its texts
        async with backend.runs.connect() as conn:
            texts = (
                await conn.execute(select(run_texts.c.digest).where(run_texts.c.thread_key == key))
            ).all()
        assert texts
        await stored.delete_thread(CALLER, thread)
        assert await backend.runs.kept_texts(key) == 0
