"""A pooled connection keeps nothing of the context it was opened in (issue 27: with memory
written after the answer, a run found every connection busy and opened one mid-run; its
socket's reader kept the run's context — LangGraph's Pregel loop and the run's messages — after
the user was erased). Opened with a context variable set, a MySQL connection (the rounds'
engine, the store's pool) and a Redis connection register no callback that can see it."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest
from sqlalchemy import text

from tests.support.redis_stack import PrivateRedis
from threadkeeper.adapters.redis_mysql.backend import (
    FailFastPool,
    _engine,
    _store_pool,
    redis_client,
)

pytestmark = pytest.mark.integration

RUN = contextvars.ContextVar[object]("run")


class Messages:
    """What a run's context holds (stands for the Pregel loop and its messages)."""


def sockets_seeing(marker: object) -> list[Any]:
    """The callbacks registered on this loop's sockets whose context holds ``marker``."""
    loop: Any = asyncio.get_running_loop()
    seen = []
    for key in loop._selector.get_map().values():
        for handle in key.data:
            if handle is not None and handle._context.get(RUN) is marker:
                seen.append(handle)
    return seen


async def test_a_mysql_connection_opened_in_a_run_keeps_nothing_of_it(mysql: str) -> None:
    engine = _engine(mysql)
    store = FailFastPool(await _store_pool(mysql))
    marker = Messages()
    token = RUN.set(marker)
    try:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        async with store.acquire() as connection, connection.cursor() as cursor:
            await cursor.execute("SELECT 1")
        assert not sockets_seeing(marker), "a pooled connection kept the run's context"
    finally:
        RUN.reset(token)
        store.close()
        await store.wait_closed()
        await engine.dispose()


async def test_a_redis_connection_opened_in_a_run_keeps_nothing_of_it(
    redis_server: PrivateRedis,
) -> None:
    client = redis_client(redis_server.url)
    marker = Messages()
    token = RUN.set(marker)
    try:
        assert await client.ping()
        assert not sockets_seeing(marker), "a pooled connection kept the run's context"
    finally:
        RUN.reset(token)
        await client.aclose()
