"""The Redis saver's serializer: ``JsonPlusRedisSerializer`` with a memo of the messages it has
revived — the redis-mysql counterpart of ``adapters.serde.MemoSerializer``.

A Redis checkpoint is one RedisJSON document holding the thread's recent messages as LangChain
constructor envelopes (``{"lc": 1, "type": "constructor", "id": [...], "kwargs": {...}}``).
Every read revives each of them: a recursive Python walk over every dict and list in the
envelope (``_revive_if_needed``, children first), a failed ``import_module`` of the legacy
``langchain.schema.messages`` path the envelope names, then a pydantic construction; every
write calls ``to_json`` on each message again. Both grow with the messages the budget keeps
(~156 at the default 8,000 tokens): in ``benchmarks/profile_turns.py`` a turn of a 120-turn
thread spent ~29 ms more in the saver than an early turn (``docs/benchmarks/
profile-turns-redis-mysql-memo-before.md``; ``docs/benchmarks.md``).

Writing also walked every message first: ``_preprocess_redis_json`` normalizes the checkpoint
before encoding, and for each item of the message list it imported three names and ran seven
type checks before handing the message back unchanged (~0.75 ms for 156 messages). A message,
and a plain scalar, is handed back at once here — what the library's walk returns for them.

Here an envelope is keyed by its compact JSON (``orjson.dumps`` of the parsed dict, a few µs)
and the message revived from it is handed out again for the same bytes; a message the memo
handed out, every field still as revived, is written as those bytes (``orjson.Fragment``).
Exact by construction, as ``MessageMemo`` is: equal bytes revive to equal messages, and a
message is written as bytes that revive to it. Everything else is LangGraph's own handling.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer

from threadkeeper.adapters.serde import MessageMemo

_PLAIN = frozenset({str, int, float, bool, type(None)})
"""Values ``_preprocess_redis_json`` returns as they are (exact types: a subclass takes the
library's walk)."""


def _is_envelope(obj: dict[str, Any]) -> bool:
    return obj.get("type") == "constructor" and obj.get("lc") in (1, 2)


class MemoRedisSerializer(JsonPlusRedisSerializer):
    """``JsonPlusRedisSerializer`` reviving through a :class:`MessageMemo` keyed by an
    envelope's JSON, and writing a message it handed out, unchanged, as that JSON."""

    def __init__(self, memo: MessageMemo | None = None) -> None:
        super().__init__()
        self.memo = memo if memo is not None else MessageMemo()

    def _preprocess_redis_json(
        self, obj: Any, *, encode_bytes: Callable[[bytes], Any] | None = None
    ) -> Any:
        # the library returns both unchanged, after its imports and type checks
        if type(obj) in _PLAIN or isinstance(obj, BaseMessage):
            return obj
        return super()._preprocess_redis_json(obj, encode_bytes=encode_bytes)

    def _revive_if_needed(self, obj: Any) -> Any:
        if not (isinstance(obj, dict) and _is_envelope(obj)):
            return super()._revive_if_needed(obj)
        data = orjson.dumps(obj)
        known = self.memo.recall(data)
        if known is not None:
            return known
        value = super()._revive_if_needed(obj)
        if isinstance(value, BaseMessage):
            self.memo.keep(data, value)
        return value

    def _default_handler(self, obj: Any) -> Any:
        if isinstance(obj, BaseMessage):
            data = self.memo.encoded(obj)
            if data is not None:
                return orjson.Fragment(data)
        return super()._default_handler(obj)
