"""The reliability suite: load, double sends, storage and provider faults, a state machine of
the API and raw-bytes fuzzing, against real servers (issue 9).

Two sizes. CI runs it reduced (``scripts/test`` → ``tox -e reliability``), with generous time
limits: a busy machine must still pass, so tests assert order and outcome, never speed.

Slow callbacks: every event loop the test process makes during a test runs in asyncio's debug
mode with ``slow_callback_duration`` = 50 ms, and each callback that held its loop longer is
counted per test, recorded with the other measurements (kind ``slow-callbacks``) and summed up
at the end of the run. They are reported, not gated: on a busy 2-core machine a
callback that is linear and short can still take 50 ms (a scheduler pause, the first import of
a module, a garbage collection), so failing on one would make the suite flaky. Servers started
as processes (``tests.support.servers``) keep their own loops and are not counted here.
``tox -e reliability-full`` runs it at full size (``THREADKEEPER_RELIABILITY_SIZE=full``) and
records every measurement (the ``measure`` fixture) into
``THREADKEEPER_RELIABILITY_RESULTS`` (JSON lines); ``tests/reliability/report.py`` turns
those into ``docs/reliability.md``'s tables.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import (  # noqa: F401 (the API suite's fixtures, per profile)
    auth,
    database,
    make_app,
    profile,
    redis_stack,
)

SIZE = os.environ.get("THREADKEEPER_RELIABILITY_SIZE", "reduced")
FULL = SIZE == "full"
RESULTS = os.environ.get("THREADKEEPER_RELIABILITY_RESULTS")


def sized(reduced: int, full: int) -> int:
    """``reduced`` in CI, ``full`` in ``tox -e reliability-full``."""
    return full if FULL else reduced


Measure = Callable[..., None]


@pytest.fixture
def measure(request: pytest.FixtureRequest) -> Iterator[Measure]:
    """``measure(kind, **figures)``: one line of the report (kept only when
    ``THREADKEEPER_RELIABILITY_RESULTS`` names a file). Figures are reported, never gated."""
    lines: list[dict[str, Any]] = []

    def record(kind: str, **figures: Any) -> None:
        lines.append(
            {"test": request.node.nodeid, "kind": kind, "size": SIZE, "at": time.time(), **figures}
        )

    yield record
    if RESULTS and lines:
        path = Path(RESULTS)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            for line in lines:
                out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")


# -- slow callbacks ---------------------------------------------------------------------------

SLOW_CALLBACK_SECONDS = 0.05
"""asyncio logs (in debug mode) every callback that holds its loop longer than this."""


class SlowCallbacks(logging.Handler):
    """The slow callbacks asyncio logs, per test: (seconds, thread, what ran)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.found: list[tuple[float, str, str]] = []
        self.per_test: dict[str, list[tuple[float, str, str]]] = {}
        self.guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        # base_events: logger.warning("Executing %s took %.3f seconds", handle, seconds)
        if not str(record.msg).startswith("Executing ") or len(record.args or ()) != 2:
            return
        handle, seconds = record.args  # type: ignore[misc]
        with self.guard:
            self.found.append((float(seconds), record.threadName or "?", str(handle)[:160]))


SLOW = SlowCallbacks()
_loop_init = asyncio.BaseEventLoop.__init__


def _debug_loop_init(self: asyncio.BaseEventLoop, *args: Any, **kwargs: Any) -> None:
    _loop_init(self, *args, **kwargs)
    self.set_debug(True)
    self.slow_callback_duration = SLOW_CALLBACK_SECONDS


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures: every loop made until its teardown ends (pytest-asyncio's,
    the state machine's, the test client's portal thread's) logs its slow callbacks."""
    with SLOW.guard:
        SLOW.found.clear()
    asyncio.BaseEventLoop.__init__ = _debug_loop_init  # type: ignore[method-assign]
    logging.getLogger("asyncio").addHandler(SLOW)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield  # after the test's fixtures are torn down (apps stopped, loops closed)
    asyncio.BaseEventLoop.__init__ = _loop_init  # type: ignore[method-assign]
    logging.getLogger("asyncio").removeHandler(SLOW)
    with SLOW.guard:
        found, SLOW.found = SLOW.found, []
    SLOW.per_test[item.nodeid] = found
    if RESULTS and found:
        line = {
            "test": item.nodeid,
            "kind": "slow-callbacks",
            "size": SIZE,
            "at": time.time(),
            "count": len(found),
            "max_ms": round(max(s for s, _, _ in found) * 1e3, 1),
            "over_100ms": sum(1 for s, _, _ in found if s > 0.1),
            "slowest": max(found)[2],
        }
        path = Path(RESULTS)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")


def pytest_terminal_summary(terminalreporter: Any) -> None:
    tests = SLOW.per_test
    slow = {test: found for test, found in tests.items() if found}
    if not tests:
        return
    total = sum(len(found) for found in slow.values())
    terminalreporter.section("slow callbacks (reported, not gated)")
    terminalreporter.write_line(
        f"{total} callbacks held an event loop over {SLOW_CALLBACK_SECONDS * 1e3:.0f} ms "
        f"in {len(slow)} of {len(tests)} tests"
    )
    for test, found in sorted(slow.items(), key=lambda kv: -max(kv[1])[0])[:10]:
        terminalreporter.write_line(f"  {len(found):4d} x in {test}, the slowest:")
        for seconds, thread, handle in sorted(found, reverse=True)[:3]:
            terminalreporter.write_line(f"    {seconds * 1e3:7.1f} ms ({thread}) {handle}")
