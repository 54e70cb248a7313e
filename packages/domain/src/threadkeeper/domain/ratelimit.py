"""Sliding windows of hits per key: the ``RateWindows`` port behind
``THREADKEEPER_RATE_LIMIT_PER_MINUTE``, and its in-process implementation.

A profile with a server every replica reaches provides windows that replica share (Redis on
redis-mysql, PostgreSQL on postgres); without one (embedded) the windows are this process's.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol


class RateWindows(Protocol):
    """Sliding windows of hits, one per key."""

    shared: bool
    """Whether every replica counts in the same window (``False``: this process only)."""

    async def hit(self, key: str, *, limit: int, window: float) -> float | None:
        """Count one hit on ``key`` unless ``limit`` hits are already in the last ``window``
        seconds: ``None`` when counted, else the seconds until one more would be allowed."""
        ...


class InMemoryWindows:
    """Hit times per key in this process (a deque each; emptied keys are dropped)."""

    shared = False
    SWEEP_EVERY = 1024

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._hits: dict[str, deque[float]] = {}
        self._since_sweep = 0

    def __len__(self) -> int:
        return len(self._hits)

    async def hit(self, key: str, *, limit: int, window: float) -> float | None:
        # no await inside: atomic on the event loop
        now = self._clock()
        self._sweep(now, window)
        hits = self._hits.setdefault(key, deque())
        while hits and hits[0] <= now - window:
            hits.popleft()
        if len(hits) >= limit:
            return hits[0] + window - now
        hits.append(now)
        return None

    def _sweep(self, now: float, window: float) -> None:
        """Forget users whose every hit has left the window (bounded memory)."""
        self._since_sweep += 1
        if self._since_sweep < self.SWEEP_EVERY:
            return
        self._since_sweep = 0
        for key in [k for k, hits in self._hits.items() if not hits or hits[-1] <= now - window]:
            del self._hits[key]
