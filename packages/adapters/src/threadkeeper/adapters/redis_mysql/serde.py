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

Reading admits only the types of ``adapters.serde.STORED_TYPES``, the allowlist of every
stored read. An envelope is checked before anything it names is imported (the library imports
any module an envelope names, constructs any dataclass, and revives any class of
``langchain_core``'s mapping): an ``lc: 1`` envelope must name a LangChain id that the mapping
resolves to an allowed class, an ``lc: 2`` one an allowed ``module.name``; anything else raises
``StoredDataRefused``. The msgpack the serializer falls back to reads through the same
``StoredTypesHook`` as the SQL profiles; ``pickle`` is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson
from langchain_core.load.load import ALL_SERIALIZABLE_MAPPINGS
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.redis.jsonplus_redis import JsonPlusRedisSerializer

from threadkeeper.adapters.serde import (
    MSGPACK_FORMATS,
    STORED_TYPES,
    THREADKEEPER_TYPES,
    MessageMemo,
    StoredTypesHook,
    refuse,
    screened,
)

_PLAIN = frozenset({str, int, float, bool, type(None)})
"""Values ``_preprocess_redis_json`` returns as they are (exact types: a subclass takes the
library's walk)."""


JSON_FORMATS: Final = MSGPACK_FORMATS | {"json"}
"""What this serializer reads: its JSON, and the msgpack it falls back to (never ``pickle``)."""

LC1_IDS: Final[frozenset[tuple[str, ...]]] = frozenset(
    key
    for key, path in ALL_SERIALIZABLE_MAPPINGS.items()
    if (".".join(path[:-1]), path[-1]) in STORED_TYPES
)
"""``lc: 1`` envelope ids LangChain's reviver maps to an allowed class (``to_json`` writes
``["langchain", "schema", "messages", "HumanMessage"]``, mapped to
``langchain_core.messages.human.HumanMessage``)."""

LC2_IDS: Final[frozenset[tuple[str, ...]]] = frozenset(
    (*module.split("."), name) for module, name in STORED_TYPES
)
"""``lc: 2`` envelope ids (``[*module.split("."), name]``, as ``_encode_constructor_envelope``
writes them) of the allowed types."""


def is_envelope(obj: dict[str, Any]) -> bool:
    """A LangChain constructor envelope (``lc`` 1 or 2)."""
    return obj.get("type") == "constructor" and obj.get("lc") in (1, 2)


def admit(envelope: dict[str, Any]) -> None:
    """Nothing, for an envelope naming an allowed type; else ``StoredDataRefused`` naming it."""
    ident = envelope.get("id")
    if isinstance(ident, list) and all(isinstance(part, str) for part in ident):
        key = tuple(ident)
        if key in (LC1_IDS if envelope.get("lc") == 1 else LC2_IDS):
            return
        raise refuse(".".join(key))
    raise refuse("a constructor envelope without a name")


class MemoRedisSerializer(JsonPlusRedisSerializer):
    """``JsonPlusRedisSerializer`` reviving through a :class:`MessageMemo` keyed by an
    envelope's JSON, and writing a message it handed out, unchanged, as that JSON."""

    def __init__(self, memo: MessageMemo | None = None) -> None:
        super().__init__(
            pickle_fallback=False,
            # lc 2 envelopes of the allowed types LangGraph's own safe set lacks (none today)
            allowed_json_modules=[(*m.split("."), n) for m, n in THREADKEEPER_TYPES] or None,
            allowed_msgpack_modules=STORED_TYPES,
            __unpack_ext_hook__=StoredTypesHook(),
        )
        self.memo = memo if memo is not None else MessageMemo()

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_ = data[0]
        if type_ not in JSON_FORMATS:
            raise refuse(f"the {type_!r} format")
        return screened(lambda: super(MemoRedisSerializer, self).loads_typed(data))

    def _preprocess_redis_json(
        self, obj: Any, *, encode_bytes: Callable[[bytes], Any] | None = None
    ) -> Any:
        # the library returns both unchanged, after its imports and type checks
        if type(obj) in _PLAIN or isinstance(obj, BaseMessage):
            return obj
        return super()._preprocess_redis_json(obj, encode_bytes=encode_bytes)

    def _revive_if_needed(self, obj: Any) -> Any:
        if not (isinstance(obj, dict) and is_envelope(obj)):
            return super()._revive_if_needed(obj)
        admit(obj)  # before the library imports anything the envelope names
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
