"""The Redis client the redis-mysql profile uses: redis-py's, with its RedisJSON commands
encoding and decoding through orjson instead of the standard library's ``json``.

Every round writes the thread's checkpoint document (``JSON.SET``, through redisvl) and reads
it (``JSON.GET``): the thread's recent messages, up to the budget (~150 KB of JSON at the
default 8,000 tokens). redis-py's JSON commands take an encoder and a decoder, defaulting to
``json.JSONEncoder()`` / ``json.JSONDecoder()`` — every ``client.json()`` call, the saver's and
redisvl's, on the client or on a pipeline, registers its decoder as the client's response
callbacks — so the client here hands every such call orjson's instead (with the two changes
before it, a late turn's saver time in ``profile_turns.py`` fell from +28.7 to +3.2 ms over an
early turn's; ``docs/benchmarks.md``). What is stored is the same JSON value:
orjson writes UTF-8 rather than ``\\u`` escapes and ``null`` for a non-finite float (which
RedisJSON refuses from the standard encoder anyway); keys that are not strings become strings,
as with the standard encoder.
"""

from __future__ import annotations

from typing import Any

import orjson
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.commands.json import AsyncJSON


class OrjsonDecoder:
    """``json.JSONDecoder``'s ``decode`` for redis-py, by orjson (bytes or str)."""

    @staticmethod
    def decode(data: bytes | str) -> Any:
        return orjson.loads(data)


class OrjsonEncoder:
    """``json.JSONEncoder``'s ``encode`` for redis-py, by orjson."""

    @staticmethod
    def encode(value: Any) -> bytes:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)


DECODER = OrjsonDecoder()
ENCODER = OrjsonEncoder()


class OrjsonPipeline(Pipeline):
    """A pipeline whose RedisJSON commands use orjson."""

    def json(self, encoder: Any = ENCODER, decoder: Any = DECODER) -> AsyncJSON:  # type: ignore[override]
        return super().json(encoder=encoder, decoder=decoder)


class OrjsonRedis(Redis):
    """An asyncio ``Redis`` whose RedisJSON commands, its pipelines' included, use orjson."""

    def json(self, encoder: Any = ENCODER, decoder: Any = DECODER) -> AsyncJSON:  # type: ignore[override]
        return super().json(encoder=encoder, decoder=decoder)

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return OrjsonPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
