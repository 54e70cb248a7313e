"""Simultaneous sends to one thread over two replicas: exactly one answer, the rest 409.

100 simultaneous runs on one thread (reduced: 40), alternating between two replicas on one
storage; each run streams for seconds (40 ms per token), so every attempt overlaps the one
that got the thread. Exactly one is answered, every other one is 409 ``thread-busy`` naming it
(never "unknown", never a 503), the thread holds exactly that one round, and it is free again
at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import PROFILES
from tests.reliability.conftest import Measure, sized
from tests.support.load import transcript
from tests.support.servers import ProfileServer, start_server, storage

SENDS = sized(40, 100)
QUESTION = "Is dental treatment covered by my health insurance?"


@pytest.fixture(params=[p.values[0] for p in PROFILES if not isinstance(p, str)])
def replicas(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[ProfileServer]]:
    profile = str(request.param)
    slow = {"THREADKEEPER_MODEL_TOKEN_DELAY_MS": "40"}
    with (
        storage(profile) as (servers, redis),
        start_server(profile, tmp_path / "a", servers, redis, **slow) as one,
        start_server(profile, tmp_path / "b", servers, redis, **slow) as other,
    ):
        yield [one, other]


async def test_simultaneous_sends_on_two_replicas(
    replicas: list[ProfileServer], measure: Measure
) -> None:
    limits = httpx.Limits(max_connections=SENDS, max_keepalive_connections=SENDS)
    clients = [
        httpx.AsyncClient(base_url=r.url, headers=r.headers, timeout=120, limits=limits)
        for r in replicas
    ]
    try:
        start = asyncio.Event()

        async def send(index: int) -> tuple[int, dict[str, Any], float]:
            client = clients[index % 2]
            await start.wait()
            began = time.monotonic()
            response = await client.post(
                "/v1/threads/contended/runs",
                json={"message": {"content": f"{QUESTION} (send {index})"}},
                headers={"Accept": "application/json"},
            )
            return response.status_code, response.json(), time.monotonic() - began

        tasks = [asyncio.create_task(send(i)) for i in range(SENDS)]
        await asyncio.sleep(0.2)
        start.set()
        results = await asyncio.gather(*tasks)
        answered_at = time.monotonic()
        free = await clients[1].post(
            "/v1/threads/contended/runs",
            json={"message": {"content": "and one more"}},
            headers={"Accept": "application/json"},
        )
        freed_after = time.monotonic() - answered_at
        messages = await transcript(clients[0], "contended")
    finally:
        for client in clients:
            await client.aclose()
    statuses = sorted(status for status, _, _ in results)
    winner = [body for status, body, _ in results if status == 200]
    refusals = [body for status, body, _ in results if status == 409]
    measure(
        "double-send",
        profile=replicas[0].profile,
        sends=SENDS,
        answered=len(winner),
        refused_409=len(refusals),
        other=[s for s in statuses if s not in (200, 409)],
        winner_seconds=round(max(t for s, _, t in results if s == 200), 2),
        slowest_refusal_seconds=round(max((t for s, _, t in results if s == 409), default=0), 3),
        free_again_seconds=round(freed_after, 3),
    )
    assert statuses == [200] + [409] * (SENDS - 1), statuses
    running = {body.get("running_run_id") for body in refusals}
    assert running == {winner[0]["run_id"]}, f"every refusal names the winner: {running}"
    assert free.status_code == 200, free.text
    humans = [m["content"] for m in messages or [] if m["role"] == "human"]
    assert len(humans) == 2, humans  # the winner's round, then "and one more"
    assert humans[1] == "and one more"
