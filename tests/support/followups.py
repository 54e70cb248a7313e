"""Waiting for follow-up work: a run is acknowledged once its round is stored, and the memory
it teaches is written after (``domain.followups``). Tests that read memory after a run wait
until ``GET /v1/users/{user_id}/memory`` says none is pending."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

DEADLINE_SECONDS = 60.0
"""Generous: on a busy machine the worker may take a while to get its turn."""


def settled_memory(
    client: Any,
    user: str,
    headers: Mapping[str, str] | None = None,
    *,
    seconds: float = DEADLINE_SECONDS,
) -> dict[str, Any]:
    """The user's memory once no follow-up work of theirs is pending (a sync client)."""
    deadline = time.monotonic() + seconds
    while True:
        response = client.get(f"/v1/users/{user}/memory", headers=dict(headers or {}))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if not body["pending"]:
            return body
        assert time.monotonic() < deadline, "the user's memory work stayed pending"
        time.sleep(0.05)


async def asettled_memory(
    client: Any,
    user: str,
    headers: Mapping[str, str] | None = None,
    *,
    seconds: float = DEADLINE_SECONDS,
) -> dict[str, Any]:
    """``settled_memory`` with an async client."""
    deadline = time.monotonic() + seconds
    while True:
        response = await client.get(f"/v1/users/{user}/memory", headers=dict(headers or {}))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if not body["pending"]:
            return body
        assert time.monotonic() < deadline, "the user's memory work stayed pending"
        await asyncio.sleep(0.05)


def kept(memory: Mapping[str, Any]) -> dict[str, Any]:
    """What is kept of a memory body (without ``pending``): an export's ``memory``."""
    return {"profile": memory["profile"], "facts": memory["facts"]}
