"""How one message of the ledger (``tk_checkpoint_messages``) is stored: its non-default
fields, compactly, instead of LangChain's constructor form.

``JsonPlusSerializer`` writes a message as msgpack of ``(module, class name, model_dump(),
"model_validate_json")``: every field under its full name, defaults included (``name: None``,
``example: False``, ``tool_calls: []``, …) — ~200–500 bytes beyond the text of a message of the
service (docs/storage-postgres.md). A row's ``type`` column says which form its ``body`` has:

- ``msgpack`` (and any other type ``JsonPlusSerializer`` writes) — the serializer's form, as
  rows were written before this module (Alembic ``0007`` converts them; they still read).
- ``tk1`` — msgpack of ``[class, {field: value}]``: ``class`` an index into ``CLASSES``,
  each key an index into ``FIELDS`` (a field this table does not know keeps its name), only the
  fields whose ``model_dump()`` value is not the class's default; ``type`` left out when it is
  the class's own. Values are packed as ``JsonPlusSerializer`` packs them (its ext types for
  anything msgpack lacks), and read back through the allowlist of every stored read
  (``serde.STORED_TYPES``: ``serde.stored_reader``'s hook, under ``serde.screened``) — whatever
  serializer the ledger was given.
- ``tk1z`` — the same bytes, raw deflate with the preset dictionary ``ZDICT`` (written when
  that is shorter).

A message reads back as ``cls(**{every default, then the stored fields})`` — the call
``JsonPlusSerializer`` makes with the whole ``model_dump()``, with an equal dict (the stored
values go through the same msgpack packing and ext hook; the defaults left out are plain
``None``/``False``/``{}``/``[]``/strings): so it is the message the serializer's form reads back
as, same class, fields and even set of given fields (``tests/unit/adapters/test_ledger_codec``
checks every message shape). A class not in ``CLASSES`` (a subclass) is written in the
serializer's form. Alembic 0007 converts old rows with ``verify=True``: each converted body is
decoded again and kept only if it reads back equal.

``CLASSES``, ``FIELDS`` and ``ZDICT`` are part of the stored format: append to the tables, never
reorder or edit them; a different dictionary is a new type.
"""

from __future__ import annotations

import zlib
from typing import Any, Final

import ormsgpack
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    ChatMessageChunk,
    FunctionMessage,
    FunctionMessageChunk,
    HumanMessage,
    HumanMessageChunk,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
)
from langgraph.checkpoint.serde import jsonplus
from langgraph.checkpoint.serde.base import SerializerProtocol

from threadkeeper.adapters.serde import screened, stored_reader

COMPACT: Final = "tk1"
COMPRESSED: Final = "tk1z"
FORMATS: Final = (COMPACT, COMPRESSED)

CLASSES: Final[tuple[type[BaseMessage], ...]] = (
    HumanMessage,
    AIMessage,
    ToolMessage,
    SystemMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessageChunk,
    AIMessageChunk,
    ToolMessageChunk,
    SystemMessageChunk,
    ChatMessageChunk,
    FunctionMessageChunk,
)
FIELDS: Final = (
    "content",
    "id",
    "additional_kwargs",
    "response_metadata",
    "name",
    "type",
    "tool_calls",
    "invalid_tool_calls",
    "usage_metadata",
    "tool_call_id",
    "artifact",
    "status",
    "example",
    "role",
    "tool_call_chunks",
    "chunk_position",
)
ZDICT: Final = (
    b"threadkeeper\xa6run_id\xa2at\xa6status\xa9citations\xa8answered\xaaclarifying"
    b"\xa8escalate\xaamodel_name\xadfinish_reason\xa4stop\xaatool_calls\xa4name\xa4args"
    b"\xa2id\xa4type\xa9tool_call\xacinput_tokens\xadoutput_tokens\xactotal_tokens"
    b"\xb3input_token_details\xb4output_token_details\xa8chunk_id\xa6doc_id\xa5title"
    b"\xa8lc_run--\xa6+00:00\xa3202\xa7success\xa5error\xadsystem_fingerprint"
    b"\xa9logprobs\xa5model\xa7service_tier\xadmodel_provider"
)
"""Deflate's preset dictionary for ``tk1z``: keys and values common in the metadata of
LangChain messages and of threadkeeper's stamps (msgpack strings, as they appear)."""

_CLASS_CODE: Final = {cls: code for code, cls in enumerate(CLASSES)}
_FIELD_CODE: Final = {name: code for code, name in enumerate(FIELDS)}
_SMALLEST_TO_COMPRESS: Final = 64


def _defaults(cls: type[BaseMessage]) -> tuple[dict[str, Any], frozenset[str]]:
    """The class's defaults as ``model_dump()`` shows them (required fields left out), and
    the names of the defaults that are mutable (copied for every message built)."""
    values: dict[str, Any] = {}
    for name, info in cls.model_fields.items():
        if not info.is_required():
            values[name] = info.get_default(call_default_factory=True)
    mutable = frozenset(k for k, v in values.items() if isinstance(v, dict | list))
    return values, mutable


_DEFAULTS: Final = {cls: _defaults(cls) for cls in CLASSES}


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _fresh(cls: type[BaseMessage]) -> dict[str, Any]:
    values, mutable = _DEFAULTS[cls]
    fresh = dict(values)
    for name in mutable:
        fresh[name] = type(values[name])()  # {} or []: the only mutable defaults
    return fresh


def pack(message: BaseMessage) -> bytes | None:
    """The ``tk1`` body of ``message``; None for a class this format does not hold."""
    cls = type(message)
    code = _CLASS_CODE.get(cls)
    if code is None:
        return None
    defaults = _DEFAULTS[cls][0]
    fields: dict[int | str, Any] = {}
    for name, value in message.model_dump().items():
        if name in defaults and _same(value, defaults[name]):
            continue
        fields[_FIELD_CODE.get(name, name)] = value
    return ormsgpack.packb(
        [code, fields], default=jsonplus._msgpack_default, option=jsonplus._option
    )


def unpack(body: bytes, serde: SerializerProtocol) -> BaseMessage:
    """The message of a ``tk1`` body (values' ext types decoded by the hook of
    ``stored_reader(serde)``: only ``STORED_TYPES``; anything else raises
    ``StoredDataRefused``)."""
    hook = stored_reader(serde)._unpack_ext_hook
    code, fields = screened(
        lambda: ormsgpack.unpackb(body, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
    )
    cls = CLASSES[code]
    kwargs = _fresh(cls)
    for key, value in fields.items():
        kwargs[FIELDS[key] if isinstance(key, int) else key] = value
    message: BaseMessage
    try:
        message = cls(**kwargs)
    except Exception:  # as JsonPlusSerializer does
        message = cls.model_construct(**kwargs)
    return message


def _compress(raw: bytes) -> bytes:
    deflate = zlib.compressobj(6, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, ZDICT)
    return deflate.compress(raw) + deflate.flush()


def inflate(body: bytes) -> bytes:
    """The ``tk1`` bytes of a ``tk1z`` body."""
    stream = zlib.decompressobj(-15, ZDICT)
    return stream.decompress(body) + stream.flush()


def encode(
    message: BaseMessage, serde: SerializerProtocol, *, verify: bool = False
) -> tuple[str, bytes]:
    """``(type, body)`` of a ledger row holding ``message``: the compact form, compressed
    when that is shorter; the serializer's form for a class the compact form does not hold.

    ``verify``: decode the compact body again and fall back to the serializer's form unless it
    reads back equal (class and every field) — Alembic 0007 converts old rows so; the run path
    does not (~50 µs a message), the tests check every shape against the serializer's reading.
    """
    raw = pack(message)
    if raw is None:
        return serde.dumps_typed(message)
    if verify:
        try:
            back: BaseMessage | None = unpack(raw, serde)
        except Exception:
            back = None
        if type(back) is not type(message) or back != message:
            return serde.dumps_typed(message)
    if len(raw) >= _SMALLEST_TO_COMPRESS:
        squeezed = _compress(raw)
        if len(squeezed) < len(raw):
            return COMPRESSED, squeezed
    return COMPACT, raw


def decode(type_: str, body: bytes, serde: SerializerProtocol) -> Any:
    """The value of a ledger row, whichever form it was written in (read through
    ``stored_reader(serde)``: ``StoredDataRefused`` for anything it does not store)."""
    if type_ == COMPRESSED:
        return unpack(inflate(body), serde)
    if type_ == COMPACT:
        return unpack(body, serde)
    return stored_reader(serde).loads_typed((type_, body))
