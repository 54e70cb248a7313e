"""Connections opened in an empty context, so that a pooled connection keeps nothing of the run
that happened to open it.

asyncio copies the current context into every callback a transport registers — its socket's
reader, for as long as the connection lives. A connection a pool opens in the middle of a run
(all of its connections busy with other runs or with follow-up work) would keep that run's
context: LangGraph's Pregel loop, and through it the run's messages — an erased user's text
held by this process until the connection closes (``tests/api/test_erasure_caches.py``). Each
connection is opened in a task of its own with an empty context instead. (PostgreSQL's
psycopg registers its socket only while it waits, and SQLite has no socket: they need none.)
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

T = TypeVar("T")


def in_empty_context(opener: Callable[..., Awaitable[T]]) -> Callable[..., asyncio.Task[T]]:
    """``opener`` run as a task with an empty context (awaitable as ``opener`` was)."""

    def opened(*args: Any, **kwargs: Any) -> asyncio.Task[T]:
        async def run() -> T:
            return await opener(*args, **kwargs)

        return asyncio.create_task(run(), context=contextvars.Context())

    return opened


def connect_in_empty_context(engine: AsyncEngine, default: Callable[..., Awaitable[Any]]) -> None:
    """Every DBAPI connection ``engine`` opens is opened by ``default`` (the driver's connect,
    e.g. ``asyncmy.connect``) in an empty context (SQLAlchemy's ``do_connect`` event and its
    async dialects' ``async_creator_fn``)."""

    @event.listens_for(engine.sync_engine, "do_connect")
    def _connect(dialect: Any, record: Any, cargs: Any, cparams: dict[str, Any]) -> None:
        cparams["async_creator_fn"] = in_empty_context(cparams.get("async_creator_fn") or default)


def empty_context_connection(base: type[T]) -> type[T]:
    """A redis-py asyncio connection class whose socket is opened in an empty context."""

    class EmptyContextConnection(base):  # type: ignore[misc,valid-type]
        async def _connect(self) -> None:
            await in_empty_context(super()._connect)()

    EmptyContextConnection.__name__ = f"EmptyContext{base.__name__}"
    return EmptyContextConnection
