"""The checkpoint serializer the SQL profiles use: LangGraph's ``JsonPlusSerializer`` with a
memo of the messages it has decoded.

A thread's checkpoint holds every message of the thread (ADR-0007: persist everything, trim
only at the model call), so every run decodes the whole history again: one pydantic
construction per message, the largest cost of a turn late in a long thread (py-spy, embedded
profile, turn ~170: 30% of the run's CPU in ``loads_typed``; docs/benchmarks.md). A stored
message's msgpack bytes never change, so the decoded message is kept by those bytes and each
later decode of the same bytes returns a shallow copy of it (``model_copy``: no validation).

Exact by construction: equal bytes decode to equal messages. Only LangChain messages are kept
(their fields are replaced, never mutated in place, by LangGraph and threadkeeper alike — a
copy keeps a caller's assignment to a field from reaching the memo); every other value is
decoded as before. The memo is bounded by the bytes it keys on and emptied when full.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Final

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

EXT_PYDANTIC_V2: Final = 5
"""The msgpack extension code ``JsonPlusSerializer`` writes pydantic v2 models with (messages)."""
MEMO_BYTES: Final = 64 << 20
"""Bytes of encoded messages the memo keys on before it is emptied (64 MiB)."""
_SMALLEST: Final = 32
"""Shorter payloads are decoded every time (nothing worth keeping)."""


class MessageMemo:
    """An ``ext_hook`` for ``ormsgpack.unpackb`` that remembers decoded messages by their bytes."""

    def __init__(self, decode: Callable[[int, bytes], Any], budget: int = MEMO_BYTES) -> None:
        self._decode = decode
        self._budget = budget
        self._memo: dict[bytes, BaseMessage] = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __call__(self, code: int, data: bytes) -> Any:
        if code != EXT_PYDANTIC_V2 or len(data) < _SMALLEST:
            return self._decode(code, data)
        known = self._memo.get(data)
        if known is not None:
            self.hits += 1
            return known.model_copy()
        value = self._decode(code, data)
        if not isinstance(value, BaseMessage):
            return value
        self.misses += 1
        with self._lock:
            if self._bytes + len(data) > self._budget:
                self._memo.clear()
                self._bytes = 0
            self._memo[bytes(data)] = value
            self._bytes += len(data)
        return value.model_copy()

    def __len__(self) -> int:
        return len(self._memo)


def checkpoint_serializer() -> JsonPlusSerializer:
    """LangGraph's default serializer, its decoding of messages memoized (:class:`MessageMemo`)."""
    default = JsonPlusSerializer()
    # the default's own ext hook (same allowlist) behind the memo; the constructor takes a
    # replacement hook as ``__unpack_ext_hook__``
    decode: Callable[[int, bytes], Any] = default._unpack_ext_hook
    return JsonPlusSerializer(__unpack_ext_hook__=MessageMemo(decode))
