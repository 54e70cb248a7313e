"""A deadline on every PostgreSQL call (issue 29, item 1: a store that hangs).

libpq has no read timeout: a server, pooler or network path that accepts a connection and then
never answers leaves a query waiting for ever — ``tcp_user_timeout`` and keepalives only catch
data the peer does not acknowledge, and a hung server's kernel acknowledges everything. psycopg's
asynchronous connection waits for every operation (a statement and its results, a commit, a
pipeline's sync, a COPY) in one method, ``wait``, which takes a timeout. The connections of the
postgres profile pass it the store deadline (``THREADKEEPER_STORE_TIMEOUT_SECONDS``): past it the
connection is closed — the pool discards it, SQLAlchemy invalidates it — and the call fails with
``StoreTimeout`` (an ``OperationalError``: 503 ``unavailable``, like a server that went away).
Connecting has libpq's own ``connect_timeout``.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import errors


class StoreTimeout(psycopg.OperationalError):
    """PostgreSQL did not answer within the store deadline; the connection was closed."""


def deadline_connection(seconds: float) -> type[psycopg.AsyncConnection[Any]]:
    """An ``AsyncConnection`` class each of whose operations fails after ``seconds``."""
    if not seconds > 0:
        raise ValueError(f"a store deadline must be positive, not {seconds!r}")

    class DeadlineConnection(psycopg.AsyncConnection[Any]):
        async def wait(
            self,
            gen: Any,
            interval: float = 0.1,
            timeout: float | None = None,  # noqa: ASYNC109 (psycopg's signature)
        ) -> Any:
            bound = seconds if timeout is None else min(timeout, seconds)
            try:
                return await super().wait(gen, interval, bound)
            except errors._WaitTimeout as exc:  # psycopg's own, for wait(timeout=)
                self.pgconn.finish()  # out of step with the server: never used again
                raise StoreTimeout(
                    f"PostgreSQL did not answer within {seconds:g} s "
                    "(THREADKEEPER_STORE_TIMEOUT_SECONDS); the connection was closed"
                ) from exc

    DeadlineConnection.__name__ = f"DeadlineConnection{seconds:g}s"
    return DeadlineConnection
