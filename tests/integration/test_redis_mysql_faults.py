"""MySQL goes away in the middle of a run (a TCP proxy between the service process and the
machine's MariaDB is cut while the answer streams over real HTTP): the archive write fails, so
the client gets ``error`` and nothing of the round is anywhere — not in the archive, not in
Redis — and the thread is free. When MySQL is back the service works on, without a restart."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from httpx_sse import connect_sse
from sqlalchemy.engine import make_url

from tests.api.conftest import TOKEN
from tests.e2e.test_server import free_port, serve, wait_ready
from tests.support.mysql import fresh_database, query
from tests.support.redis_stack import private_redis
from tests.support.tcp_proxy import TcpProxy, tcp_proxy

pytestmark = pytest.mark.integration

HEADERS = {
    "X-Tenant-Id": "acme-insurance",
    "X-User-Id": "fault-user",
    "Authorization": f"Bearer {TOKEN}",
}
DENTAL = "Is dental treatment covered by my health insurance?"
MATERNITY = "What does maternity cover include?"
CLAIM = "How do I file a claim?"


def archived(mysql_url: str, thread: str) -> list[tuple[str, str]]:
    return [
        (r[0], r[1])
        for r in query(
            mysql_url,
            "SELECT role, content FROM chat_messages WHERE thread_id = %s ORDER BY seq",
            (thread,),
        )
    ]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, str, str, TcpProxy]]:
    """(service URL, direct MySQL URL, Redis URL, the proxy the service reaches MySQL by)."""
    with private_redis() as redis_server, fresh_database() as mysql:
        url = make_url(mysql)
        with tcp_proxy(url.host or "127.0.0.1", url.port or 3306) as proxy:
            proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(False)
            port = free_port()
            process = serve(
                tmp_path,
                port,
                THREADKEEPER_PROFILE="redis-mysql",
                THREADKEEPER_REDIS_URL=redis_server.url,
                THREADKEEPER_MYSQL_URL=proxied,
                THREADKEEPER_SERVICE_TOKEN=TOKEN,
                THREADKEEPER_MODEL_TOKEN_DELAY_MS="40",
            )
            base = f"http://127.0.0.1:{port}"
            try:
                wait_ready(base, process)
                yield base, mysql, redis_server.url, proxy
            finally:
                process.terminate()
                process.wait(timeout=30)


def test_mysql_lost_during_a_run_stores_nothing_of_the_round(
    service: tuple[str, str, str, TcpProxy],
) -> None:
    base, mysql, redis_url, proxy = service
    thread = f"fault-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=base, headers=HEADERS, timeout=60) as client:
        first = client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": DENTAL}},
            headers={"Accept": "application/json"},
        )
        assert first.status_code == 200, first.text
        events: list[tuple[str, dict[str, object]]] = []
        body = {"message": {"content": MATERNITY}}
        with connect_sse(client, "POST", f"/v1/threads/{thread}/runs", json=body) as source:
            for event in source.iter_sse():
                events.append((event.event, json.loads(event.data)))
                if event.event == "messages" and not any(k == "messages" for k, _ in events[:-1]):
                    proxy.cut()  # MySQL is gone while the answer streams
        kinds = [k for k, _ in events]
        assert kinds[0] == "metadata"
        assert kinds[-1] == "error", kinds
        assert not redis.Redis.from_url(redis_url).keys("tk:run-lock:*"), "the lock is free"
        answer = first.json()["message"]["content"]
        assert archived(mysql, thread) == [("human", DENTAL), ("ai", answer)], "only round one"

        proxy.restore()
        again = client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": CLAIM}},
            headers={"Accept": "application/json"},
        )
        assert again.status_code == 200, again.text
        page = client.get(f"/v1/threads/{thread}/messages", params={"limit": 100}).json()
    humans = [m["content"] for m in page["messages"] if m["role"] == "human"]
    assert humans == [DENTAL, CLAIM], "the failed round left nothing in the archive"
    checkpoint = b"".join(
        redis.Redis.from_url(redis_url).execute_command("JSON.GET", key) or b""
        for key in redis.Redis.from_url(redis_url).keys(f"checkpoint:*{thread}*")
    )
    assert MATERNITY.encode() not in checkpoint, "the failed round did not reach Redis"
    assert CLAIM.encode() in checkpoint
