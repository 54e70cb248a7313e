"""``THREADKEEPER_RATE_LIMIT_PER_MINUTE``: runs per (tenant, user) per minute, sliding window.

Counted in ``POST …/runs`` after authentication and validation, so neither a caller without a
token nor an invalid request uses up a user's runs. Over the limit → 429 problem+json with
``Retry-After`` (whole seconds until the oldest counted run leaves the window).

Where the hits are kept decides what the limit means:

- ``InMemoryWindows`` (embedded): in this process, which is the only one.
- ``RedisWindows`` (redis-mysql): in the profile's Redis, one sorted set per user updated by
  one Lua script, so every replica counts against the same window.
- ``PostgresRateWindows`` (postgres, ``adapters.postgres.ratelimit``): rows in PostgreSQL
  under a transaction-level advisory lock per user, shared the same way.

Litestar's ``RateLimitConfig`` is not used: it keys by client address unless subclassed, runs
before the guards (a request without a valid token would use up the named user's runs), keeps
a fixed window as read-modify-write in the store (lost updates across replicas), and sends no
``Retry-After``.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from threadkeeper.app.http.problems import http_problem
from threadkeeper.app.service import Caller

log = logging.getLogger("threadkeeper.app.http")

WINDOW_SECONDS = 60.0
REDIS_KEY_PREFIX = "threadkeeper:ratelimit:runs:"


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


# KEYS[1] the user's sorted set; ARGV: limit, window (ms), a unique member. Scores are the
# Redis server's clock (one clock for every replica). Returns -1 when counted, else the ms to
# wait. A retried call (the client retries on a dropped connection) re-adds the same member.
_HIT_SCRIPT = """
local key = KEYS[1]
local limit = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
if redis.call('ZCARD', key) >= limit then
  local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  return math.max(1, tonumber(oldest[2]) + window - now)
end
redis.call('ZADD', key, now, ARGV[3])
redis.call('PEXPIRE', key, window)
return -1
"""


class RedisWindows:
    """Hits in Redis, shared by every replica (the redis-mysql profile's Redis)."""

    shared = True

    def __init__(self, redis: Any, prefix: str = REDIS_KEY_PREFIX) -> None:
        self._script = redis.register_script(_HIT_SCRIPT)
        self._prefix = prefix

    async def hit(self, key: str, *, limit: int, window: float) -> float | None:
        try:
            wait_ms = await self._script(
                keys=[self._prefix + key],
                args=[limit, math.ceil(window * 1000), uuid.uuid4().hex],
            )
        except Exception:
            # Redis is the run lock too: the run itself reports it unavailable (503)
            log.warning("rate limit not checked: Redis did not answer", exc_info=True)
            return None
        wait = int(wait_ms)
        return None if wait < 0 else wait / 1000


def shared_windows(backend: Any) -> RateWindows | None:
    """Windows every replica shares, where the profile's backend has a server for them: its
    own (``rate_windows``, postgres) or its Redis (redis-mysql)."""
    own = getattr(backend, "rate_windows", None)
    if own is not None:
        return cast("RateWindows", own)
    redis = getattr(backend, "redis", None)
    if redis is not None and hasattr(redis, "register_script"):
        return RedisWindows(redis)
    return None


@dataclass
class RunRateLimit:
    """At most ``per_minute`` runs per (tenant, user) in any 60 seconds."""

    per_minute: int
    windows: RateWindows = field(default_factory=InMemoryWindows)
    window: float = WINDOW_SECONDS

    def __post_init__(self) -> None:
        if self.per_minute < 1:
            raise ValueError("per_minute must be positive (no RunRateLimit at all is off)")

    async def check(self, caller: Caller) -> None:
        """Count one run of ``caller``.

        Raises:
            ProblemDetailsException: 429 with ``Retry-After`` when over the limit.
        """
        key = f"{caller.tenant_id}:{caller.user_id}"  # ids cannot contain ":"
        wait = await self.windows.hit(key, limit=self.per_minute, window=self.window)
        if wait is None:
            return
        retry_after = max(1, math.ceil(wait))
        raise http_problem(
            429,
            f"More than {self.per_minute} runs per minute for this user; "
            f"retry after {retry_after} s.",
            slug="rate-limited",
            title="Too many runs",
            headers={"Retry-After": str(retry_after)},
        )
