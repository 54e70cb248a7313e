"""The checkpoint serializer the SQL profiles use: LangGraph's ``JsonPlusSerializer`` with a
memo of the messages it has decoded.

A thread's checkpoint holds every message of the thread (ADR-0007: persist everything, trim
only at the model call), so every run decodes the whole history again: one pydantic
construction per message, the largest cost of a turn late in a long thread (py-spy, embedded
profile, turn ~170: 30% of the run's CPU in ``loads_typed``; docs/benchmarks.md). A stored
message's msgpack bytes never change, so the decoded message is kept by those bytes and
handed out again for the same bytes (:class:`MessageMemo`). Writing is the mirror image: the
round's commit encodes the whole history again (a ``model_dump`` per message), so a message the
memo handed out, still holding the very field values it was decoded with, is encoded as the
bytes it was decoded from.

Exact by construction: equal bytes decode to equal messages. Only LangChain messages are kept;
every other value is decoded as before. The memo is bounded by the bytes it keys on and emptied
when full.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

import ormsgpack
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

EXT_PYDANTIC_V2: Final = 5
"""The msgpack extension code ``JsonPlusSerializer`` writes pydantic v2 models with (messages)."""
MEMO_BYTES: Final = 64 << 20
"""Bytes of encoded messages the memo keys on before it is emptied (64 MiB)."""
_SMALLEST: Final = 32
"""Shorter payloads are decoded every time (nothing worth keeping)."""


class MessageMemo:
    """Decoded messages remembered by the bytes they were decoded from; as an ``ext_hook`` for
    ``ormsgpack.unpackb`` (``decode`` is the hook it stands in front of).

    A remembered message is handed out itself, not a copy (a pydantic copy costs most of what
    a decode does): the messages of a checkpoint are values — LangGraph and threadkeeper
    replace a message, they never assign to a field of one. Should a field be assigned anyway,
    the memo notices (the fields differ from those it decoded: a comparison of identities) and
    decodes the bytes again; a write encodes the changed message afresh.
    """

    def __init__(
        self, decode: Callable[[int, bytes], Any] | None = None, budget: int = MEMO_BYTES
    ) -> None:
        self._decode = decode
        self._budget = budget
        self._memo: dict[bytes, tuple[BaseMessage, dict[str, Any]]] = {}
        """bytes → (the message decoded from them, its fields as decoded)."""
        self._bytes_of: dict[int, bytes] = {}
        """``id(message)`` → its bytes, for every message in ``_memo`` (which holds it)."""
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.reused = 0

    def __call__(self, code: int, data: bytes) -> Any:
        if self._decode is None:
            raise TypeError("a MessageMemo used as an ext_hook needs the hook it stands before")
        if code != EXT_PYDANTIC_V2 or len(data) < _SMALLEST:
            return self._decode(code, data)
        known = self.recall(data)
        if known is not None:
            return known
        value = self._decode(code, data)
        if isinstance(value, BaseMessage):
            self.keep(bytes(data), value)
        return value

    def recall(self, data: bytes) -> BaseMessage | None:
        """The message decoded from ``data`` before, if it still holds the fields it had."""
        known = self._memo.get(data)
        if known is not None and known[0].__dict__ == known[1]:
            self.hits += 1
            return known[0]
        return None

    def keep(self, data: bytes, value: BaseMessage) -> None:
        """Remember that ``data`` decoded to ``value`` (replacing what ``data`` decoded to
        before, if that message's fields were assigned since)."""
        self.misses += 1
        with self._lock:
            known = self._memo.get(data)
            if known is not None:  # a field was assigned: the changed message is forgotten
                self._bytes_of.pop(id(known[0]), None)
                self._size -= len(data)
            if self._size + len(data) > self._budget:
                self._memo.clear()
                self._bytes_of.clear()
                self._size = 0
            self._memo[data] = (value, dict(value.__dict__))
            self._bytes_of[id(value)] = data
            self._size += len(data)

    def encoded(self, value: BaseMessage) -> bytes | None:
        """The bytes ``value`` was decoded from, if the memo handed it out and every field still
        holds the value it was decoded with."""
        data = self._bytes_of.get(id(value))
        if data is None:
            return None
        known = self._memo.get(data)
        if known is None or known[0] is not value or value.__dict__ != known[1]:
            return None
        self.reused += 1
        return data

    def __len__(self) -> int:
        return len(self._memo)


class MemoSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` reading through a :class:`MessageMemo` and writing a message it
    handed out, unchanged, as the bytes it read. Everything else as LangGraph does it."""

    def __init__(self, memo: MessageMemo | None = None) -> None:
        if memo is None:
            # the default's own ext hook (same allowlist) behind the memo; the constructor
            # takes a replacement hook as ``__unpack_ext_hook__``
            memo = MessageMemo(JsonPlusSerializer()._unpack_ext_hook)
        super().__init__(__unpack_ext_hook__=memo)
        self.memo = memo

    def _default(self, value: Any) -> Any:
        if isinstance(value, BaseMessage):
            encoded = self.memo.encoded(value)
            if encoded is not None:
                return ormsgpack.Ext(EXT_PYDANTIC_V2, encoded)
        return jsonplus._msgpack_default(value)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if obj is None or isinstance(obj, bytes | bytearray):
            return super().dumps_typed(obj)
        try:
            return "msgpack", ormsgpack.packb(obj, default=self._default, option=jsonplus._option)
        except ormsgpack.MsgpackEncodeError:
            return super().dumps_typed(obj)  # LangGraph's own handling (pickle fallback, error)


def checkpoint_serializer() -> MemoSerializer:
    """LangGraph's default serializer with its messages memoized (:class:`MemoSerializer`)."""
    return MemoSerializer()
