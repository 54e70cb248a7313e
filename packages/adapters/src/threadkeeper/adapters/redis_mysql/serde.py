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

Here an envelope is keyed by its compact JSON (``orjson.dumps`` of the parsed dict, a few µs)
and the message revived from it is handed out again for the same bytes; a message the memo
handed out, every field still as revived, is written as those bytes (``orjson.Fragment``).
Exact by construction, as ``MessageMemo`` is: equal bytes revive to equal messages, and a
message is written as bytes that revive to it. Everything else is LangGraph's own handling.
"""

from __future__ import annotations

from typing import Any

import orjson
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer

from threadkeeper.adapters.serde import MessageMemo


def _is_envelope(obj: dict[str, Any]) -> bool:
    return obj.get("type") == "constructor" and obj.get("lc") in (1, 2)


class MemoRedisSerializer(JsonPlusRedisSerializer):
    """``JsonPlusRedisSerializer`` reviving through a :class:`MessageMemo` keyed by an
    envelope's JSON, and writing a message it handed out, unchanged, as that JSON."""

    def __init__(self, memo: MessageMemo | None = None) -> None:
        super().__init__()
        self.memo = memo if memo is not None else MessageMemo()

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
