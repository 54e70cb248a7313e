"""The redis-mysql profile when Redis forgets: flushed, restarted, or the checkpoint's TTL ran
out. The next run is seeded from the MySQL archive (cold start) and its answer shows that the
earlier conversation is remembered; the archive neither loses nor duplicates a round.

How "remembers" is observable with the builtin model: it escalates to a person after two
clarifying replies in a row. Two unclear messages, then Redis loses everything, then a third
unclear message: with the restored context the answer is ``escalate`` (and its handoff context
quotes the earlier messages); without it, it would be one more ``clarifying``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import redis
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.api.conftest import Servers, headers_for, run, settings_for
from tests.support.mysql import fresh_database, query
from tests.support.redis_stack import PrivateRedis, private_redis
from threadkeeper.app.application import create_app
from threadkeeper.domain.escalation import HANDOFF_MESSAGES

pytestmark = pytest.mark.integration

UNCLEAR = ["xyzzy plugh frobnicate", "qwrtp zxcvb mnbvc", "plover lkjhg poiuy"]
DENTAL = "Is dental treatment covered by my health insurance?"


@pytest.fixture
def redis_server() -> Iterator[PrivateRedis]:
    with private_redis() as server:
        yield server


@pytest.fixture
def mysql() -> Iterator[str]:
    with fresh_database() as url:
        yield url


@pytest.fixture
def servers(redis_server: PrivateRedis, mysql: str) -> Servers:
    return Servers(redis_url=redis_server.url, mysql_url=mysql)


def thread_keys(redis_url: str, thread: str) -> list[bytes]:
    client = redis.Redis.from_url(redis_url)
    try:
        return [k for k in client.scan_iter(match=f"*{thread}*") if not k.startswith(b"tk:")]
    finally:
        client.close()


def archived(mysql_url: str, thread: str) -> list[tuple[str, str, str]]:
    """(run_id, role, content) of the thread's archive rows, in order."""
    return [
        (r[0], r[1], r[2])
        for r in query(
            mysql_url,
            "SELECT run_id, role, content FROM chat_messages WHERE thread_id = %s ORDER BY seq",
            (thread,),
        )
    ]


@pytest.fixture
async def client_for(tmp_path: Path, servers: Servers) -> AsyncIterator[Any]:
    opened: list[AsyncTestClient[Litestar]] = []

    async def open_client(**overrides: Any) -> AsyncTestClient[Litestar]:
        app = create_app(settings_for("redis-mysql", tmp_path, servers, **overrides))
        client = AsyncTestClient(app, timeout=30)
        await client.__aenter__()
        client.headers.update(headers_for("redis-mysql"))
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        await client.__aexit__(None, None, None)


async def converse(client: AsyncTestClient[Litestar], thread: str) -> list[dict[str, Any]]:
    bodies = [await run(client, thread, DENTAL)]
    for text in UNCLEAR[:2]:
        bodies.append(await run(client, thread, text))
    assert [b["status"] for b in bodies] == ["answered", "clarifying", "clarifying"]
    return bodies


async def assert_remembers(
    client: AsyncTestClient[Litestar], thread: str, earlier: list[dict[str, Any]], mysql: str
) -> None:
    body = await run(client, thread, UNCLEAR[2])
    assert body["status"] == "escalate", "the restored context holds two clarifying replies"
    recent = [m["content"] for m in body["handoff_context"]["recent_messages"]]
    assert UNCLEAR[0] in recent
    assert UNCLEAR[1] in recent
    rows = archived(mysql, thread)
    runs = [r[0] for r in rows]
    assert runs == [run_id for b in [*earlier, body] for run_id in (b["run_id"],) * 2]
    assert [r[1] for r in rows] == ["human", "ai"] * 4, "nothing lost, nothing duplicated"
    page = (await client.get(f"/v1/threads/{thread}/messages", params={"limit": 100})).json()
    assert [m["content"] for m in page["messages"][::2]] == [DENTAL, *UNCLEAR]
    state = await asyncio.to_thread(client.blocking_portal.call, _thread_state, client, thread)
    humans = [m.content for m in state["messages"] if m.type == "human"]
    assert humans == [DENTAL, *UNCLEAR], "the seeded context, then this run"
    ids = [m.id for m in state["messages"]]
    assert ids[:6] == [m["id"] for m in page["messages"][:6]], "restored under the same ids"


async def test_a_flushed_redis_is_recovered_from_the_archive(
    client_for: Any, redis_server: PrivateRedis, mysql: str
) -> None:
    client = await client_for()
    thread = f"flush-{uuid.uuid4().hex[:8]}"
    earlier = await converse(client, thread)
    assert thread_keys(redis_server.url, thread)
    redis.Redis.from_url(redis_server.url).flushall()
    assert not thread_keys(redis_server.url, thread)
    await assert_remembers(client, thread, earlier, mysql)
    assert thread_keys(redis_server.url, thread), "the thread lives in Redis again"


async def test_a_restarted_redis_is_recovered_from_the_archive(
    client_for: Any, redis_server: PrivateRedis, mysql: str
) -> None:
    client = await client_for()
    thread = f"restart-{uuid.uuid4().hex[:8]}"
    earlier = await converse(client, thread)
    redis_server.restart()  # no persistence: every key and index is gone
    await assert_remembers(client, thread, earlier, mysql)
    ready = await client.get("/health/ready")
    assert ready.status_code == 200, ready.text
    indexes = redis.Redis.from_url(redis_server.url).execute_command("FT._LIST")
    assert {b"checkpoint", b"checkpoint_write"} <= set(indexes), "indexes re-created"


async def test_an_expired_checkpoint_is_recovered_from_the_archive(
    client_for: Any, redis_server: PrivateRedis, mysql: str
) -> None:
    client = await client_for(checkpoint_ttl_minutes=0.05)  # 3 s
    thread = f"ttl-{uuid.uuid4().hex[:8]}"
    earlier = await converse(client, thread)
    keys = thread_keys(redis_server.url, thread)
    probe = redis.Redis.from_url(redis_server.url)
    assert keys
    assert all(0 < probe.ttl(k) <= 3 for k in keys), "every key carries the TTL"
    for _ in range(100):
        if not thread_keys(redis_server.url, thread):
            break
        await asyncio.sleep(0.1)
    assert not thread_keys(redis_server.url, thread), "the checkpoint expired"
    await assert_remembers(client, thread, earlier, mysql)


async def test_the_rolling_summary_survives_a_cold_start(
    client_for: Any, redis_server: PrivateRedis, mysql: str
) -> None:
    """With ``summarize`` in the pipeline the archive keeps the latest rolling summary, and a
    cold start puts it back into state: the model is shown the conversation's beginning."""
    client = await client_for(
        hooks="truncate_tool_results,summarize,compact", summary_after_turns=2, token_budget=900
    )
    thread = f"summary-{uuid.uuid4().hex[:8]}"
    questions = [
        DENTAL,
        "Does my policy cover physiotherapy sessions?",
        "How do I file a claim for a hospital stay?",
        "What is the waiting period for maternity cover?",
        "Can I add my spouse to my health insurance?",
        "Is emergency treatment abroad covered?",
    ] * 2
    for question in questions:
        await run(client, thread, question)
    stored = [json.loads(r[0]) for r in query(mysql, "SELECT summary FROM chat_summaries")]
    assert len(stored) == 1, "one summary row per thread"
    (summary,) = stored
    assert summary["version"] > 1, "folded more than once: a fresh summary could not match it"
    redis.Redis.from_url(redis_server.url).flushall()
    await run(client, thread, "And what about dental check-ups for children?")
    state = await asyncio.to_thread(client.blocking_portal.call, _thread_state, client, thread)
    restored = state["summary"]
    assert restored["version"] >= summary["version"], "the archived summary was restored"
    first_lines = summary["text"].splitlines()[:3]
    assert all(line in restored["text"] for line in first_lines), "the beginning is kept"


async def _thread_state(client: AsyncTestClient[Litestar], thread: str) -> dict[str, Any]:
    from tests.api.conftest import HEADERS

    service = await client.app.state.container.service()  # type: ignore[attr-defined]
    config = {
        "configurable": {"thread_id": f"{HEADERS['X-Tenant-Id']}:{HEADERS['X-User-Id']}:{thread}"}
    }
    state = await service.agent.aget_state(config)
    return dict(state.values)


async def test_redis_down_is_503_and_the_thread_recovers_when_it_is_back(
    client_for: Any, redis_server: PrivateRedis, mysql: str
) -> None:
    client = await client_for()
    thread = f"down-{uuid.uuid4().hex[:8]}"
    earlier = await converse(client, thread)
    redis_server.stop()
    try:
        response = await client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": UNCLEAR[2]}},
            headers={"Accept": "application/json"},
        )
        assert response.status_code == 503, response.text
        assert response.json()["type"].endswith("unavailable")
        assert (await client.get("/health/ready")).status_code == 503
        page = await client.get(f"/v1/threads/{thread}/messages")
        assert page.status_code == 200, "the transcript is served from MySQL alone"
        assert len(page.json()["messages"]) == 6
    finally:
        redis_server.start()
    await assert_remembers(client, thread, earlier, mysql)


async def test_tool_calls_are_audited_not_archived(client_for: Any, mysql: str) -> None:
    client = await client_for()
    thread = f"tools-{uuid.uuid4().hex[:8]}"
    await run(client, thread, DENTAL)
    body = await run(client, thread, "Please give me the full details of the dental cover")
    assert body["status"] == "answered"
    audit = query(
        mysql,
        "SELECT tool, status, arguments_digest, duration_ms FROM tool_invocations "
        "WHERE run_id = %s",
        (body["run_id"],),
    )
    assert len(audit) == 1
    tool, status, digest, duration = audit[0]
    assert (tool, status) == ("fetch_faq_document", "success")
    assert len(digest) == 64
    assert duration >= 0
    rows = archived(mysql, thread)
    assert [r[1] for r in rows] == ["human", "ai"] * 2, "no tool rows in the transcript"


async def test_a_real_models_clarifications_still_count_after_a_cold_start(
    redis_server: PrivateRedis, mysql: str, tmp_path: Path
) -> None:
    """Issue 10: the builtin model recognises its own clarifying replies by their text; any
    other model's were forgotten when Redis was, so after a cold start the third unclear
    message was one more clarification. The archive now keeps each answer's status."""
    from tests.support.scripted_model import ScriptedChatModel
    from threadkeeper.adapters.knowledge import KnowledgeBase
    from threadkeeper.adapters.redis_mysql import open_redis_mysql
    from threadkeeper.app.config import Settings
    from threadkeeper.app.container import build_service
    from threadkeeper.app.service import Caller, RunMessage, RunRequest
    from threadkeeper.domain.estimate import EstimatingCounter

    settings = Settings.of(
        profile="redis-mysql",
        redis_url=redis_server.url,
        mysql_url=mysql,
        service_token="t",
        data_dir=str(tmp_path),
    )
    caller = Caller("acme-insurance", "cold-user")
    model = ScriptedChatModel(default="Which of your policies do you mean, exactly?")
    async with open_redis_mysql(redis_server.url, mysql) as backend:
        service = build_service(
            settings=settings,
            backend=backend,
            counter=EstimatingCounter(),
            knowledge=KnowledgeBase.from_directory(),
            model=model,
        )

        async def ask(text: str) -> dict[str, Any]:
            handle = await service.start_run(caller, "cold", RunRequest(RunMessage(text)))
            return msgspec.to_builtins(await handle.result())  # type: ignore[no-any-return]

        assert [(await ask(u))["status"] for u in UNCLEAR[:2]] == ["clarifying", "clarifying"]
        client = redis.Redis.from_url(redis_server.url)
        try:
            client.flushall()
        finally:
            client.close()
        body = await ask(UNCLEAR[2])
        await service.wait_idle()
    assert body["status"] == "escalate", body
    assert body["message"]["content"] == HANDOFF_MESSAGES["en"]
