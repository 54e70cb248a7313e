"""A deadline that does not wait for the work it gives up on.

``asyncio.timeout`` cancels the work and waits for it to unwind — and psycopg unwinds a
cancelled query by sending a cancel request over a new connection to the server, which takes
libpq's connect timeout (2 s) when the server is partitioned. A probe that must answer within
a second (``/health/ready``) cancels the work and answers at once; the work finishes
unwinding in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_STORE_TIMEOUT_SECONDS = 5.0
"""One call on PostgreSQL or MySQL (``THREADKEEPER_STORE_TIMEOUT_SECONDS``): a statement with its
results, a commit, a connection's set-up. Well above a normal call (milliseconds; a large
round's commit under load, tens of them), well below a client's patience. Past it the call
fails as if the server had gone away (503 ``unavailable``) and its connection is discarded
(issue 29, item 1: a server that accepts and never answers)."""
MIGRATION_SECONDS = 3600.0
"""``migrate``'s deadline per statement instead: an index built on a large table may take
minutes, and an operator watches it."""


def _retrieve(task: asyncio.Task[Any]) -> None:
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()


async def answer_within(seconds: float, work: Coroutine[Any, Any, T]) -> T:
    """``await work`` for at most ``seconds``.

    Raises:
        TimeoutError: the work did not finish in time (it is cancelled, not awaited).
    """
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        task.add_done_callback(_retrieve)
        raise TimeoutError(f"no answer within {seconds:g} s")
    return task.result()
