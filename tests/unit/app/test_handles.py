"""``LiveRun.batches()``: the events queued when asked for, in order, ending as ``events()``."""

from __future__ import annotations

import asyncio

import pytest

from threadkeeper.app.runs.handles import CompletedRun, LiveRun
from threadkeeper.app.service import RunEvent, RunFailed


def delta(i: int) -> RunEvent:
    return RunEvent("messages", {"id": "a1", "delta": f"w{i}"})


async def test_what_was_queued_comes_as_one_batch_in_order_then_what_follows() -> None:
    run = LiveRun("r")
    batches = run.batches()
    for i in range(4):
        run.queue.put_nowait(delta(i))
    assert await anext(batches) == [delta(i) for i in range(4)]
    later = asyncio.ensure_future(anext(batches))
    await asyncio.sleep(0)
    assert not later.done()  # nothing queued: it waits
    run.queue.put_nowait(delta(4))
    assert await later == [delta(4)]
    run.queue.put_nowait(RunEvent("end", {"run_id": "r"}))
    run.close()
    assert await anext(batches) == [RunEvent("end", {"run_id": "r"})]
    with pytest.raises(StopAsyncIteration):
        await anext(batches)


async def test_a_failure_comes_after_the_events_queued_before_it() -> None:
    run = LiveRun("r")
    run.queue.put_nowait(delta(0))
    run.queue.put_nowait(delta(1))
    run.fail(RunFailed("boom"))
    run.close()
    batches = run.batches()
    assert await anext(batches) == [delta(0), delta(1)]
    with pytest.raises(RunFailed, match="boom"):
        await anext(batches)


async def test_events_are_the_batches_one_by_one() -> None:
    run = LiveRun("r")
    for i in range(3):
        run.queue.put_nowait(delta(i))
    run.queue.put_nowait(RunEvent("end", {"run_id": "r"}))
    run.close()
    end = RunEvent("end", {"run_id": "r"})
    assert [e async for e in run.events()] == [*(delta(i) for i in range(3)), end]


@pytest.mark.parametrize("reader", ["batches", "events"])
@pytest.mark.parametrize("finishing", [False, True])
async def test_closing_before_the_end_cancels_the_run_unless_it_is_finishing(
    reader: str, finishing: bool
) -> None:
    run = LiveRun("r")
    run.task = asyncio.create_task(asyncio.sleep(60))
    run.finishing = finishing
    run.queue.put_nowait(delta(0))
    read = run.batches() if reader == "batches" else run.events()
    await anext(read)
    await read.aclose()  # the client is gone
    await asyncio.sleep(0)
    assert run.task.cancelled() is not finishing
    run.task.cancel()


async def test_a_completed_run_is_one_batch() -> None:
    done = CompletedRun("r", {"status": "answered"}, "t")  # type: ignore[arg-type]
    assert [b async for b in done.batches()] == [[e async for e in done.events()]]
    assert [e.event for e in [e async for e in done.events()]] == ["metadata", "end"]
