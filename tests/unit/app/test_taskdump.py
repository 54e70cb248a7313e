"""The task dump names where each task waits, to the innermost await, and no local."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from threadkeeper.app.taskdump import install_task_dump, task_dump


async def _innermost(gate: asyncio.Event, secret: str) -> None:
    await gate.wait()


async def _outer(gate: asyncio.Event) -> None:
    await _innermost(gate, "insured-secret-4242")


async def test_the_dump_follows_each_task_to_its_innermost_await() -> None:
    gate = asyncio.Event()
    task = asyncio.create_task(_outer(gate), name="stuck-run")
    await asyncio.sleep(0)
    try:
        dump = task_dump()
    finally:
        gate.set()
        await task
    block = dump.split("task stuck-run:\n", 1)[1]
    frames = [line.strip() for line in block.splitlines()]
    assert frames[0].endswith(" _outer")
    assert frames[1].endswith(" _innermost")
    assert any(f.endswith(" wait") and "locks.py" in f for f in frames[2:4])
    assert "insured-secret-4242" not in dump


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="no SIGUSR1 here")
async def test_sigusr1_logs_the_dump() -> None:
    loop = asyncio.get_running_loop()
    logged: list[str] = []
    arrived = asyncio.Event()

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())
            arrived.set()  # the handler runs in the loop's own signal callback

    logger = logging.getLogger("threadkeeper.app.taskdump")
    catch = Catch(logging.WARNING)
    logger.addHandler(catch)
    assert install_task_dump(loop)
    try:
        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.wait_for(arrived.wait(), timeout=30)  # generous: a busy machine
    finally:
        loop.remove_signal_handler(signal.SIGUSR1)
        logger.removeHandler(catch)
    assert "asyncio tasks:" in logged[0]
    assert "test_sigusr1_logs_the_dump" in logged[0]
