"""``RateWindows`` in Redis: the redis-mysql profile's rate limit, shared by every replica."""

from __future__ import annotations

import logging
import math
import uuid
from typing import Any

log = logging.getLogger(__name__)

REDIS_KEY_PREFIX = "threadkeeper:ratelimit:runs:"

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
