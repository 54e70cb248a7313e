"""Token accounting: the ``TokenCounter`` port and the exact tiktoken counters.

A message costs its framing, the tokens of its text, and for an AI message the tokens of each
tool call's name and JSON arguments (and of each invalid tool call's raw name and arguments).
Counts are cached by message id *and* a fingerprint of what is counted: ids come from callers
(a backend may send any ``message_id``, and the same id in another thread or tenant), so an id
alone must never let a long message borrow a short one's count. Rules that change a message's
content still give it a new id (``derive_id``), so the transcript can tell the two apart.

The vocabularies come from the ``bpe-openai`` wheel, checked against tiktoken's own sha256, and
are never downloaded.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import repeat
from operator import attrgetter
from pathlib import Path
from typing import Any, Generic, TypeVar

from langchain_core.messages import AIMessage, BaseMessage

from threadkeeper.domain import caches
from threadkeeper.domain.caches import message_bytes, messages_bytes, text_bytes

V = TypeVar("V")

#: Tokens every message costs beyond its text (role and separators in the chat format).
MESSAGE_FRAMING = 3
#: Tokens every tool call costs beyond its name and arguments.
TOOL_CALL_FRAMING = 3
#: Tokens the model is primed with before its reply.
REPLY_PRIMING = 3

_CACHE_LIMIT = 200_000
_IDENTITY_LIMIT = 65_536
"""Messages an :class:`IdentityMemo` holds before it is emptied."""
IDENTITY_BYTES = 64 << 20
"""... or messages of this many bytes (``caches.message_bytes``: 64 MiB)."""
_SYSTEM_CACHE_LIMIT = 256
"""System texts kept (a prompt is a few KiB; a full cache is cleared, as the message cache)."""
SYSTEM_CACHE_BYTES = 4 << 20
"""... or texts of this many bytes (a summary or prompt can be long: 4 MiB)."""


def message_text(message: BaseMessage) -> str:
    """The text a model reads from a message: string content, or the text of content blocks.

    Non-text blocks are counted by their JSON form, so that they are never free.
    """
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
        else:
            parts.append(json.dumps(block, ensure_ascii=False, sort_keys=True, default=str))
    return "".join(parts)


def tool_call_text(name: str, args: Mapping[str, Any]) -> str:
    """The serialized form of one tool call's arguments, as counted."""
    return name + json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)


class IdentityMemo(Generic[V]):
    """A value computed from a message, remembered by the message object itself.

    A turn late in a thread passes over every message of its history several times per run
    (the summary's window, trim's window, the builtin model's estimate; issue 12), and the
    history's messages are the very objects of the run before (the checkpoint serializer's
    memo hands them out again). A value is handed back only for the same object whose content,
    tool calls and invalid tool calls are still the very objects it was computed from, so a
    message given new content (``model_copy``, an assignment) is computed afresh. A list of
    content blocks changed in place is not noticed: messages are values here, as the checkpoint
    serializer's memo already assumes. Messages are held, so an id is not reused while its
    entry lives; the memo is emptied when full — ``limit`` messages, or messages of
    ``budget`` bytes (:data:`IDENTITY_BYTES` by default) — and on every deletion
    (``caches.forget``: a message says nothing of its thread).
    """

    __slots__ = ("__weakref__", "_budget", "_bytes", "_known", "_limit")

    def __init__(self, limit: int = _IDENTITY_LIMIT, budget: int | None = None) -> None:
        self._known: dict[int, tuple[BaseMessage, object, object, object, V, int, str | None]] = {}
        self._limit = limit
        self._budget = budget
        self._bytes = 0
        caches.register(self)

    def get(self, message: BaseMessage) -> V | None:
        known = self._known.get(id(message))
        if known is None or known[0] is not message:
            return None
        fields = message.__dict__  # pydantic's fields; a getattr of a missing one raises inside
        if (
            known[1] is fields.get("content")
            and known[2] is fields.get("tool_calls")
            and known[3] is fields.get("invalid_tool_calls")
        ):
            caches.verify(message, known[6], "an IdentityMemo")
            return known[4]
        return None

    def put(self, message: BaseMessage, value: V) -> V:
        size = message_bytes(message)
        budget = IDENTITY_BYTES if self._budget is None else self._budget
        if len(self._known) >= self._limit or self._bytes + size > budget:
            self.clear()
        fields = message.__dict__
        replaced = self._known.get(id(message))
        if replaced is not None:
            self._bytes -= replaced[5]
        self._known[id(message)] = (
            message,
            fields.get("content"),
            fields.get("tool_calls"),
            fields.get("invalid_tool_calls"),
            value,
            size,
            caches.fingerprint(message),
        )
        self._bytes += size
        return value

    def clear(self) -> None:
        self._known = {}
        self._bytes = 0

    def forget(self, threads: frozenset[str], user: tuple[str, str] | None) -> None:
        self.clear()

    @property
    def size(self) -> int:
        """The bytes of the messages held (``caches.message_bytes``)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._known)


_CONTENT = attrgetter("content")
_FIELDS = attrgetter("__dict__")


Snapshot = tuple[tuple[object, ...], tuple[object, ...]]
"""Messages' contents and tool calls, as :func:`content_snapshot` takes them."""


def content_snapshot(messages: Sequence[BaseMessage]) -> Snapshot:
    """What each message's counts depend on besides the object: the contents, and the tool
    calls of each (``None`` for a message without the field), in two C-level passes. Equal
    snapshots of the same objects mean none was given new content since (an assignment
    replaces the content object; a list of content blocks changed in place is not noticed, as
    :class:`IdentityMemo` does not notice it)."""
    return (
        tuple(map(_CONTENT, messages)),
        tuple(map(dict.get, map(_FIELDS, messages), repeat("tool_calls"))),
    )


_SLICE_LIMIT = 65_536
"""Messages a :class:`SliceSums` places before it is emptied."""
SLICE_BYTES = 64 << 20
"""... or messages of this many bytes (``caches.message_bytes``: 64 MiB)."""


class SliceSums:
    """Sums of a per-message vector of ints over a sequence of messages, answered for a run of
    messages already seen in that order by two prefix sums instead of a pass over them.

    A late turn's model call is shown the thread's newest turns, which the call before was
    shown too, less its oldest turn and plus its new messages (issue 12). The runs seen are
    kept as append-only lists with the prefix sums of ``value``; a query that starts at a
    known message and equals the run from there — the same objects or equal messages, with
    the same content and tool calls (:func:`content_snapshot`) — is answered from the sums, and
    messages after the run's end extend it. Anything else starts a new run. Emptied when it
    would place more than ``_SLICE_LIMIT`` messages or messages of more than ``budget`` bytes
    (:data:`SLICE_BYTES` by default), and on every deletion (``caches.forget``)."""

    __slots__ = ("__weakref__", "_budget", "_bytes", "_lock", "_value", "_where", "_width")

    def __init__(
        self,
        value: Callable[[BaseMessage], tuple[int, ...]],
        width: int,
        budget: int | None = None,
    ) -> None:
        self._value = value
        self._width = width
        self._where: dict[int, tuple[_Run, int]] = {}
        """``id(message)`` → the run it was placed in and its position there."""
        self._lock = threading.Lock()
        self._budget = budget
        self._bytes = 0
        """The bytes of the messages placed since it was last emptied (each run holds those
        placed in it; a run is extended only while it is in ``_where``)."""
        caches.register(self)

    def total(self, messages: Sequence[BaseMessage]) -> tuple[int, ...]:
        """The sum of ``value`` over ``messages``, element-wise."""
        if not messages:
            return (0,) * self._width
        found = self._where.get(id(messages[0]))
        if found is not None:
            run, at = found
            known = run.messages[at : at + len(messages)]
            seen = len(known)
            if (
                known[0] is messages[0]
                and known == [*messages[:seen]]
                and run.contents(at, at + seen) == content_snapshot(messages[:seen])
            ):
                if seen == len(messages):
                    return run.between(at, at + seen)
                if at + seen == len(run.messages):  # the run's end: extend it
                    tail = messages[seen:]
                    size = messages_bytes(tail)
                    with self._lock:
                        if len(run.messages) == at + seen and self._fits(len(tail), size):
                            self._place(run, tail, size)
                            return run.between(at, at + len(messages))
        run = _Run(self._width)
        size = messages_bytes(messages)
        with self._lock:
            if not self._fits(len(messages), size):
                self._clear()
            self._place(run, messages, size)
        return run.between(0, len(messages))

    def _fits(self, count: int, size: int) -> bool:
        budget = SLICE_BYTES if self._budget is None else self._budget
        return len(self._where) + count <= _SLICE_LIMIT and self._bytes + size <= budget

    def _clear(self) -> None:
        self._where = {}
        self._bytes = 0

    def _place(self, run: _Run, messages: Sequence[BaseMessage], size: int) -> None:
        start = len(run.messages)
        run.extend(messages, map(self._value, messages), content_snapshot(messages))
        for position, message in enumerate(messages, start):
            self._where[id(message)] = (run, position)
        self._bytes += size

    def forget(self, threads: frozenset[str], user: tuple[str, str] | None) -> None:
        with self._lock:
            self._clear()

    @property
    def size(self) -> int:
        """The bytes of the messages placed (``caches.message_bytes``)."""
        return self._bytes


class _Run:
    """Messages seen in this order, their content snapshots and prefix sums (append-only)."""

    __slots__ = ("_calls", "_content", "_prefix", "messages")

    def __init__(self, width: int) -> None:
        self.messages: list[BaseMessage] = []
        self._content: list[object] = []
        self._calls: list[object] = []
        self._prefix: list[list[int]] = [[0] for _ in range(width)]

    def extend(
        self,
        messages: Sequence[BaseMessage],
        values: Iterable[tuple[int, ...]],
        snapshot: Snapshot,
    ) -> None:
        self._content.extend(snapshot[0])
        self._calls.extend(snapshot[1])
        for value in values:
            for prefix, part in zip(self._prefix, value, strict=True):
                prefix.append(prefix[-1] + part)
        self.messages.extend(messages)

    def contents(self, start: int, end: int) -> Snapshot:
        return tuple(self._content[start:end]), tuple(self._calls[start:end])

    def between(self, start: int, end: int) -> tuple[int, ...]:
        return tuple(prefix[end] - prefix[start] for prefix in self._prefix)


class TokenCounter(ABC):
    """Counts what a message costs the model, cached by message id and content."""

    #: The name configuration uses for this counter (``THREADKEEPER_TOKENIZER``).
    name: str

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int, int], int] = {}
        """(id, hash of the text, hash of the tool calls' fingerprint) → tokens: no text."""
        self._system_cache: dict[str, int] = {}
        """System prompt or summary text → tokens (keyed by the text itself: exact)."""
        self._system_bytes = 0
        self._objects: IdentityMemo[int] = IdentityMemo()
        """The same message object with the same content → tokens (no pass over the text)."""
        self._lock = threading.Lock()
        caches.register(self)

    def forget(self, threads: frozenset[str], user: tuple[str, str] | None) -> None:
        """A deletion (``caches.forget``): the system texts go (a summary or a prompt with
        the user's memory says nothing of whose it is); ``_objects`` is told itself."""
        with self._lock:
            self._system_cache = {}
            self._system_bytes = 0

    @abstractmethod
    def count_text(self, text: str) -> int:
        """Tokens of a plain string."""

    def count(self, message: BaseMessage) -> int:
        """Tokens of one message: framing, text and tool calls.

        Cached by ``message.id`` with the hash of its text and of the text of its tool calls
        (hashes: the key holds no text, so a deletion need not clear it): the
        same id with other content is counted again. ``str`` caches its hash, so a hit costs
        no pass over a text the process has hashed before. The same message object, its content
        and tool calls unchanged, is answered without even that (:class:`IdentityMemo`).
        """
        known = self._objects.get(message)
        if known is not None:
            return known
        content = message.content
        text = content if isinstance(content, str) else message_text(message)
        calls: tuple[str, ...] = ()
        if isinstance(message, AIMessage) and (message.tool_calls or message.invalid_tool_calls):
            # repr, not the JSON counted below: a cheap fingerprint of names and arguments
            calls = tuple(f"{c['name']}{c['args']!r}" for c in message.tool_calls) + tuple(
                f"~{c.get('name') or ''}{c.get('args') or ''}" for c in message.invalid_tool_calls
            )
        key = (message.id, hash(text), hash(calls)) if message.id is not None else None
        if key is not None:
            cached = self._cache.get(key)
            if cached is not None:
                return self._objects.put(message, cached)
        tokens = MESSAGE_FRAMING + self.count_text(text)
        if calls:
            assert isinstance(message, AIMessage)
            for call in message.tool_calls:
                tokens += TOOL_CALL_FRAMING + self.count_text(
                    tool_call_text(call["name"], call["args"])
                )
            for invalid in message.invalid_tool_calls:
                raw = f"{invalid.get('name') or ''}{invalid.get('args') or ''}"
                tokens += TOOL_CALL_FRAMING + self.count_text(raw)
        if key is not None:
            with self._lock:
                if len(self._cache) >= _CACHE_LIMIT:
                    self._cache.clear()
                self._cache[key] = tokens
        return self._objects.put(message, tokens)

    def count_system(self, text: str) -> int:
        """Tokens of a system prompt or summary sent as one system message.

        Cached by the text: a thread's summary and a prompt over the same retrieved documents
        and memory are counted again on every model call otherwise. Emptied when full
        (``_SYSTEM_CACHE_LIMIT`` texts or :data:`SYSTEM_CACHE_BYTES`) and on every deletion.
        """
        if not text:
            return 0
        cached = self._system_cache.get(text)
        if cached is not None:
            return cached
        tokens = MESSAGE_FRAMING + self.count_text(text)
        size = text_bytes(text)
        with self._lock:
            if (
                len(self._system_cache) >= _SYSTEM_CACHE_LIMIT
                or self._system_bytes + size > SYSTEM_CACHE_BYTES
            ):
                self._system_cache = {}
                self._system_bytes = 0
            if text not in self._system_cache:
                self._system_bytes += size
            self._system_cache[text] = tokens
        return tokens


class VocabularyError(RuntimeError):
    """A packaged vocabulary is missing or does not match tiktoken's published hash."""


def _packaged_ranks(encoding: str, expected_sha256: str) -> dict[bytes, int]:
    # the wheel's data file, found without importing the package (which loads three
    # vocabularies of its own: most of a command's start-up)
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:  # pragma: no cover
        raise VocabularyError("bpe-openai is not installed")
    package = Path(next(iter(spec.submodule_search_locations)))
    resource = package / "data" / f"{encoding}.tiktoken.gz"
    try:
        raw = gzip.decompress(resource.read_bytes())
    except FileNotFoundError as exc:  # pragma: no cover - depends on the installed wheel
        raise VocabularyError(f"bpe-openai does not ship {encoding}") from exc
    digest = hashlib.sha256(raw).hexdigest()
    if digest != expected_sha256:
        raise VocabularyError(
            f"{encoding} vocabulary sha256 {digest} != tiktoken's {expected_sha256}"
        )
    import base64

    ranks: dict[bytes, int] = {}
    for line in raw.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


_ENCODINGS: dict[str, Any] = {}
_ENCODINGS_LOCK = threading.Lock()


def load_encoding(name: str) -> Any:
    """A ``tiktoken.Encoding`` for ``o200k_base`` or ``cl100k_base``, built offline.

    tiktoken's own constructor arguments (pattern, special tokens, expected hash) are reused;
    only the vocabulary loader is replaced by one that reads the packaged file.
    """
    with _ENCODINGS_LOCK:
        if name in _ENCODINGS:
            return _ENCODINGS[name]
        import tiktoken
        import tiktoken_ext.openai_public as public

        constructors: dict[str, Callable[[], dict[str, Any]]] = {
            "o200k_base": public.o200k_base,
            "cl100k_base": public.cl100k_base,
        }
        if name not in constructors:
            raise VocabularyError(f"no packaged vocabulary for {name!r}")
        original = public.load_tiktoken_bpe

        def offline(_url: str, expected_hash: str | None = None) -> dict[bytes, int]:
            if expected_hash is None:  # pragma: no cover - tiktoken always passes one
                raise VocabularyError(f"{name}: tiktoken gave no expected hash")
            return _packaged_ranks(name, expected_hash)

        public.load_tiktoken_bpe = offline
        try:
            spec = constructors[name]()
        finally:
            public.load_tiktoken_bpe = original
        encoding = tiktoken.Encoding(**spec)
        _ENCODINGS[name] = encoding
        return encoding


class TiktokenCounter(TokenCounter):
    """Exact counts for an OpenAI encoding (default ``o200k_base``)."""

    def __init__(self, encoding: str = "o200k_base") -> None:
        super().__init__()
        self.name = encoding
        self._encode = load_encoding(encoding).encode_ordinary

    def count_text(self, text: str) -> int:
        return len(self._encode(text)) if text else 0


class CharacterCounter(TokenCounter):
    """One token per character: a predictable counter for tests and worked examples."""

    name = "characters"

    def count_text(self, text: str) -> int:
        return len(text)


def derive_id(message_id: str | None, tag: str) -> str:
    """A new, deterministic id for a message whose content a rule changed."""
    base = message_id or "anon"
    return f"{base}~{tag}"
