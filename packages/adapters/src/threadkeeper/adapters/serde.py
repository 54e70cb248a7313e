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
when full, and emptied on every thread deletion, erasure and memory reset of this process
(``domain.caches.forget``): its entries are keyed by bytes, which say nothing of whose message
they hold.

Stored bytes never run code. LangGraph's serializer, left at its default, imports and calls
whatever ``(module, name)`` a msgpack extension value names (CVE-2026-28277): one edited
checkpoint row would run ``os.system`` on the next read. Every decode of stored bytes here —
checkpoints and pending writes (:class:`MemoSerializer`), the ledger's rows
(``ledger_codec``), the Redis saver's JSON and msgpack (``redis_mysql.serde``) — reads only the
types of :data:`STORED_TYPES`, through LangGraph's own allowlist (``allowed_msgpack_modules``),
and turns what LangGraph's strict mode would quietly hand back as the raw payload into
:class:`~threadkeeper.domain.errors.StoredDataRefused`, naming what was refused
(:class:`StoredTypesHook`, :func:`screened`). The ``pickle`` and ``json`` formats, which
threadkeeper never writes, are refused whole. :func:`reading` names the thread in the refusal
and logs it once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final, TypeVar

import ormsgpack
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.event_hooks import SerdeEvent, register_serde_event_listener
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from threadkeeper.domain import caches
from threadkeeper.domain.errors import StoredDataRefused
from threadkeeper.domain.threads import log_name

log = logging.getLogger(__name__)
T = TypeVar("T")

EXT_PYDANTIC_V2: Final = 5
"""The msgpack extension code ``JsonPlusSerializer`` writes pydantic v2 models with (messages)."""
MEMO_BYTES: Final = 64 << 20
"""Bytes of encoded messages the memo keys on before it is emptied (64 MiB)."""
_SMALLEST: Final = 32
"""Shorter payloads are decoded every time (nothing worth keeping)."""

# -- what stored bytes may name -------------------------------------------------------------------

THREADKEEPER_TYPES: Final[frozenset[tuple[str, str]]] = frozenset()
"""Types threadkeeper stores beyond LangGraph's safe set: none. A checkpoint holds LangChain
messages (their content blocks, tool calls and metadata are plain dicts and lists), the rolling
summary as a plain dict, and what LangGraph itself writes (``Send`` for tool calls, ``Interrupt``
and ``Command`` were they used, datetimes, UUIDs) — all in ``SAFE_MSGPACK_TYPES``; the tests
that store and read threads on every profile pass with only that set allowed (a message
subclass, which threadkeeper never writes, is refused: ``test_ledger_codec``). Add a type here
only deliberately, with a comment saying what stores it: ``(module, name)`` as
``JsonPlusSerializer`` writes it (``type(value).__module__``, ``type(value).__name__``)."""

STORED_TYPES: Final[frozenset[tuple[str, str]]] = frozenset(
    {(str(key[0]), str(key[1])) for key in SAFE_MSGPACK_TYPES} | THREADKEEPER_TYPES
)
"""Every type stored bytes may name, the one allowlist of every profile and store.

``SAFE_MSGPACK_TYPES`` is LangGraph's floor — its ext hook admits those whatever it is given:
every LangChain message class and chunk (``langchain_core.messages.*``, ``RemoveMessage``),
``Document``, LangGraph's ``Send``/``Interrupt``/``Command``/``StateSnapshot``/``PregelTask``/
``Overwrite``/``TimeoutPolicy`` and store ``Item``/``GetOp``, and value types whose construction
runs nothing (datetime, date, time, timedelta, timezone, UUID, Decimal, set, frozenset, deque,
ip addresses, ``pathlib`` paths, ZoneInfo, ``re.compile``). Pinned by
``tests/unit/adapters/test_stored_types.py``: a LangGraph upgrade that widens it shows there."""

_EXT_CODES: Final = frozenset(
    {
        jsonplus.EXT_CONSTRUCTOR_SINGLE_ARG,
        jsonplus.EXT_CONSTRUCTOR_POS_ARGS,
        jsonplus.EXT_CONSTRUCTOR_KW_ARGS,
        jsonplus.EXT_METHOD_SINGLE_ARG,
        jsonplus.EXT_PYDANTIC_V1,
        jsonplus.EXT_PYDANTIC_V2,
        jsonplus.EXT_DELTA_SNAPSHOT,
    }
)
"""The extension codes LangGraph checks a name for (and its delta snapshot, a wrapper): a numpy
array (6) — never stored here — or an unknown code is refused as it is."""

MSGPACK_FORMATS: Final = frozenset({"null", "bytes", "bytearray", "msgpack"})
"""The ``loads_typed`` formats of the SQL profiles: what ``JsonPlusSerializer`` writes. Not
``pickle`` (threadkeeper never enables the fallback; a pickle runs code by design) nor ``json``
(LangChain constructor dicts; LangGraph has not written it since its msgpack serializer, and
threadkeeper never did)."""

_BLOCKED: Final = frozenset({"msgpack_blocked", "msgpack_method_blocked"})

_refused: ContextVar[list[str] | None] = ContextVar("threadkeeper_refused", default=None)
"""What the decode in progress in this context refused (``screened``), in order."""


_NAME_CHARS: Final = 200


def shown(name: str) -> str:
    """A refused name as an error and a log line carry it: whoever wrote the stored bytes chose
    it, so it is cut to 200 characters and anything unprintable (a newline) escaped."""
    escaped = "".join(c if c.isprintable() else repr(c)[1:-1] for c in name[: _NAME_CHARS + 1])
    return escaped[:_NAME_CHARS] + ("…" if len(escaped) > _NAME_CHARS else "")


def _on_serde_event(event: SerdeEvent) -> None:
    """LangGraph's report of a type (or method) its allowlist blocked: recorded for the decode
    in progress, which then refuses the whole value (LangGraph itself hands back the raw
    payload in its place, and a listener's exception is swallowed)."""
    refused = _refused.get()
    if refused is not None and event["kind"] in _BLOCKED:
        name = f"{event['module']}.{event['name']}"
        method = event.get("method")
        refused.append(shown(f"{name}.{method}" if method else name))


register_serde_event_listener(_on_serde_event)


def refuse(name: str) -> StoredDataRefused:
    """Record ``name`` as refused by the decode in progress; the error to raise."""
    name = shown(name)
    refused = _refused.get()
    if refused is not None:
        refused.append(name)
    return StoredDataRefused(name)


def screened(decode: Callable[[], T]) -> T:
    """``decode()``, or ``StoredDataRefused`` naming the first thing it refused.

    A refusal raised inside ``ormsgpack.unpackb``'s ext hook comes out of it as a bare
    ``ValueError("ext_hook failed")``, and one raised where a library catches everything (the
    Redis saver's walk over channel values) may not come out at all: what was refused is
    recorded for this context (``refuse``, LangGraph's block events) and checked here."""
    refused: list[str] = []
    token = _refused.set(refused)
    try:
        value = decode()
    except Exception:
        if refused:
            raise StoredDataRefused(refused[0]) from None
        raise
    finally:
        _refused.reset(token)
    if refused:
        raise StoredDataRefused(refused[0])
    return value


class StoredTypesHook:
    """The ``ext_hook`` every decode of stored msgpack uses: LangGraph's, built with
    ``allowed_msgpack_modules=STORED_TYPES`` (strict: it never imports, constructs or calls
    anything else), made to refuse where LangGraph would hand back the raw payload.

    LangGraph decodes an extension value's nested ones with its own hook, which reports each
    type it blocks (``emit_serde_event``): a value in which anything was blocked is refused
    before it is returned — before a :class:`MessageMemo` in front of this hook could keep it.
    """

    def __init__(self) -> None:
        self._langgraph = JsonPlusSerializer(allowed_msgpack_modules=STORED_TYPES)._unpack_ext_hook

    def __call__(self, code: int, data: bytes) -> Any:
        refused = _refused.get()
        if refused is None:  # outside ``screened``: refuse all the same
            return screened(lambda: self(code, data))
        if code not in _EXT_CODES:
            raise refuse(f"msgpack extension type {code}")
        before = len(refused)
        value = self._langgraph(code, data)
        if len(refused) > before:
            raise StoredDataRefused(refused[before])
        return value


@contextmanager
def reading(thread_key: str) -> Iterator[None]:
    """Name the thread (its ``log_name``) in a refusal met while reading it, and log it: one
    line naming the refused type and the thread's pseudonym, nothing of the content. The
    innermost ``reading`` names it (a listing of every thread, ``""``, names none)."""
    try:
        yield
    except StoredDataRefused as exc:
        if exc.thread is None:
            exc.thread = log_name(thread_key) if thread_key else "a thread of a listing"
            log.error(
                "refused the stored data of %s: it names %s, which threadkeeper does not store "
                "(nothing of it was imported, constructed or called; the thread cannot be read "
                "until it is repaired or deleted)",
                exc.thread,
                exc.refused,
            )
        raise


def thread_of(config: Any) -> str:
    """The thread key of a saver call's config ("" when it names none)."""
    configurable = config.get("configurable", {}) if isinstance(config, dict) else {}
    return str(configurable.get("thread_id", ""))


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
        self.decode = decode
        self._budget = budget
        self._memo: dict[bytes, tuple[BaseMessage, dict[str, Any], str | None]] = {}
        """bytes → (the message decoded from them, its fields as decoded, its fingerprint in
        ``caches.check_mutations`` mode)."""
        self._bytes_of: dict[int, bytes] = {}
        """``id(message)`` → its bytes, for every message in ``_memo`` (which holds it)."""
        self._size = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        self.reused = 0
        caches.register(self)

    def __call__(self, code: int, data: bytes) -> Any:
        if self.decode is None:
            raise TypeError("a MessageMemo used as an ext_hook needs the hook it stands before")
        if code != EXT_PYDANTIC_V2 or len(data) < _SMALLEST:
            return self.decode(code, data)
        known = self.recall(data)
        if known is not None:
            return known
        value = self.decode(code, data)  # raises before ``keep`` for what it refuses
        if isinstance(value, BaseMessage):
            self.keep(bytes(data), value)
        return value

    def recall(self, data: bytes) -> BaseMessage | None:
        """The message decoded from ``data`` before, if it still holds the fields it had."""
        known = self._memo.get(data)
        if known is not None and known[0].__dict__ == known[1]:
            caches.verify(known[0], known[2], "the checkpoint serializer's memo")
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
                self._clear()
            self._memo[data] = (value, dict(value.__dict__), caches.fingerprint(value))
            self._bytes_of[id(value)] = data
            self._size += len(data)

    def _clear(self) -> None:
        self._memo = {}
        self._bytes_of = {}
        self._size = 0

    def forget(self, threads: frozenset[str], user: tuple[str, str] | None) -> None:
        """A thread was deleted or a user erased (``caches.forget``): everything goes — an
        entry's bytes do not say whose message they hold. What the process reads next is
        decoded afresh, once."""
        with self._lock:
            self._clear()

    def encoded(self, value: BaseMessage) -> bytes | None:
        """The bytes ``value`` was decoded from, if the memo handed it out and every field still
        holds the value it was decoded with."""
        data = self._bytes_of.get(id(value))
        if data is None:
            return None
        known = self._memo.get(data)
        if known is None or known[0] is not value or value.__dict__ != known[1]:
            return None
        caches.verify(value, known[2], "the checkpoint serializer's memo")
        self.reused += 1
        return data

    def __len__(self) -> int:
        return len(self._memo)


class MemoSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` reading through a :class:`MessageMemo` and writing a message it
    handed out, unchanged, as the bytes it read; reading only :data:`STORED_TYPES` (the memo
    stands before a :class:`StoredTypesHook`) and only the :data:`MSGPACK_FORMATS`. Everything
    else as LangGraph does it."""

    def __init__(self, memo: MessageMemo | None = None) -> None:
        if memo is None:
            memo = MessageMemo(StoredTypesHook())
        if not isinstance(memo.decode, StoredTypesHook):
            raise TypeError("the memo must stand before a StoredTypesHook (STORED_TYPES only)")
        # the constructor takes a replacement hook as ``__unpack_ext_hook__``; the allowlists
        # are LangGraph's own record of the configuration (the hook is what reads)
        super().__init__(
            pickle_fallback=False,
            allowed_json_modules=None,
            allowed_msgpack_modules=STORED_TYPES,
            __unpack_ext_hook__=memo,
        )
        self.memo = memo

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        type_ = data[0]
        if type_ not in MSGPACK_FORMATS:
            raise refuse(f"the {type_!r} format")
        return screened(lambda: super(MemoSerializer, self).loads_typed(data))

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
            return super().dumps_typed(obj)  # LangGraph's own error (its pickle fallback is off)


def checkpoint_serializer() -> MemoSerializer:
    """LangGraph's serializer reading only :data:`STORED_TYPES`, its messages memoized
    (:class:`MemoSerializer`)."""
    return MemoSerializer()


_shared: MemoSerializer | None = None


def stored_reader(serde: SerializerProtocol) -> MemoSerializer:
    """``serde`` when it reads stored bytes threadkeeper's way (a :class:`MemoSerializer`), else
    one shared serializer that does: a saver built with LangGraph's default serializer (a
    test's) still reads the ledger's rows through the allowlist."""
    global _shared
    if isinstance(serde, MemoSerializer):
        return serde
    if _shared is None:
        _shared = MemoSerializer()
    return _shared
