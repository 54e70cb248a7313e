"""``kill -USR1 <pid>``: every asyncio task of ``serve`` and where it waits, in the log.

What a stuck request waits on is not in a thread dump (the event loop idles in its selector):
it is in the chain of awaits of the task that serves it. This walks each task's chain
(``cr_await`` / ``gi_yieldfrom`` / ``ag_await``) and logs one line per frame — file, line and
function only, never a local, so no content of a conversation reaches the log.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)


def await_chain(awaitable: Any, limit: int = 64) -> Iterator[str]:
    """``file:line function`` for each frame of a coroutine's chain of awaits, outermost first."""
    for _ in range(limit):
        if awaitable is None:
            return
        frame = (
            getattr(awaitable, "cr_frame", None)
            or getattr(awaitable, "gi_frame", None)
            or getattr(awaitable, "ag_frame", None)
        )
        if frame is not None:
            code = frame.f_code
            yield f"{code.co_filename}:{frame.f_lineno} {code.co_name}"
        inner = (
            getattr(awaitable, "cr_await", None)
            or getattr(awaitable, "gi_yieldfrom", None)
            or getattr(awaitable, "ag_await", None)
        )
        if frame is None and inner is None:  # what the chain cannot be followed into
            yield f"<{type(awaitable).__name__}>"  # e.g. a future, an async generator's step
        awaitable = inner


def task_dump() -> str:
    """Every task of the running loop, with its chain of awaits."""
    tasks = sorted(asyncio.all_tasks(), key=lambda t: t.get_name())
    lines = [f"{len(tasks)} asyncio tasks:"]
    for task in tasks:
        lines.append(f"task {task.get_name()}:")
        lines += [f"    {frame}" for frame in await_chain(task.get_coro())]
    return "\n".join(lines)


def install_task_dump(loop: asyncio.AbstractEventLoop) -> bool:
    """Log :func:`task_dump` on ``SIGUSR1``; False where the platform has no such signal."""
    usr1 = getattr(signal, "SIGUSR1", None)
    if usr1 is None:
        return False
    try:
        loop.add_signal_handler(usr1, lambda: log.warning("%s", task_dump()))
    except (NotImplementedError, RuntimeError):  # not the main thread, or no unix signals
        return False
    return True
