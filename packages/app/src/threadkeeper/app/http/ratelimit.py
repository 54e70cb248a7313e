"""``THREADKEEPER_RATE_LIMIT_PER_MINUTE``: runs per (tenant, user) per minute, sliding window.

Counted in ``POST …/runs`` after authentication and validation, so neither a caller without a
token nor an invalid request uses up a user's runs. Over the limit → 429 problem+json with
``Retry-After`` (whole seconds until the oldest counted run leaves the window).

Where the hits are kept decides what the limit means:

- the profile's own windows (``Backend.rate_windows``), shared by every replica, where its
  servers can keep them (a sorted set per user in Redis, rows under an advisory lock in
  PostgreSQL: see the profiles' ``ratelimit`` modules);
- otherwise ``InMemoryWindows`` (``domain.ratelimit``): in this process, which is then the
  only one (a profile of one process).

Litestar's ``RateLimitConfig`` is not used: it keys by client address unless subclassed, runs
before the guards (a request without a valid token would use up the named user's runs), keeps
a fixed window as read-modify-write in the store (lost updates across replicas), and sends no
``Retry-After``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from threadkeeper.app.http.problems import http_problem
from threadkeeper.app.metrics import count_run
from threadkeeper.app.service import Caller
from threadkeeper.domain.ratelimit import InMemoryWindows, RateWindows

log = logging.getLogger("threadkeeper.app.http")

WINDOW_SECONDS = 60.0


@dataclass
class RunRateLimit:
    """At most ``per_minute`` runs per (tenant, user) in any 60 seconds."""

    per_minute: int
    windows: RateWindows = field(default_factory=InMemoryWindows)
    window: float = WINDOW_SECONDS
    profile: str = ""
    """For the refusals it counts (``threadkeeper.runs``, status ``rate-limited``)."""

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
        count_run(self.profile, "rate-limited", 429)
        raise http_problem(
            429,
            f"More than {self.per_minute} runs per minute for this user; "
            f"retry after {retry_after} s.",
            slug="rate-limited",
            title="Too many runs",
            headers={"Retry-After": str(retry_after)},
        )
