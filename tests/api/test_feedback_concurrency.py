"""Feedback sent at once on a new run (a double-clicked button, a client's retries): every
request is answered 204 and the run keeps one feedback, on every profile.

The test client answers one request at a time, so the burst is sent on the client's portal (the
loop the application and its storage run on) through an ASGI transport of its own."""

from __future__ import annotations

import asyncio
import uuid

import httpx
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.api.conftest import USER, run

Client = AsyncTestClient[Litestar]
AT_ONCE = 8
RUNS = 3


async def burst(client: Client, url: str) -> list[int]:
    """``AT_ONCE`` feedbacks on ``url`` at once; their statuses."""
    transport = httpx.ASGITransport(app=client.app)
    async with httpx.AsyncClient(
        transport=transport, base_url=str(client.base_url), headers=client.headers
    ) as burst_client:
        answers = await asyncio.gather(
            *(
                burst_client.post(url, json={"score": 1 if i % 2 else -1, "comment": f"note {i}"})
                for i in range(AT_ONCE)
            )
        )
    return [a.status_code for a in answers]


async def test_concurrent_first_feedback_is_204_every_time_and_kept_once(client: Client) -> None:
    name = f"t-{uuid.uuid4().hex[:10]}"
    statuses: list[int] = []
    for turn in range(RUNS):
        body = await run(client, name, f"Is dental treatment covered? ({turn})")
        url = f"/v1/threads/{name}/runs/{body['run_id']}/feedback"
        statuses += await asyncio.to_thread(client.blocking_portal.call, burst, client, url)
    assert statuses.count(204) == len(statuses), (
        f"{len(statuses) - statuses.count(204)} of {len(statuses)} not 204: {sorted(statuses)}"
    )
    receipt = (await client.delete(f"/v1/users/{USER}")).json()
    assert receipt["feedback"] == RUNS, "one feedback per run"
