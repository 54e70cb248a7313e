"""A callable, a pydantic model and a dataclass that record every call — for stored bytes that
name a type threadkeeper does not store (the "stored bytes run code" issue): a test plants a
value naming one of them in a store and checks that reading it back never calls it.

``CALLS`` holds one entry per call (what was called, with what). The payload builders write the
forms LangGraph's ``JsonPlusSerializer`` writes (msgpack extension types 0–5, each a msgpack
``(module, name, payload[, method])``) and the LangChain constructor envelopes the Redis
serializer writes (``{"lc": 1 | 2, "type": "constructor", "id": [...], ...}``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import ormsgpack
from langgraph.checkpoint.serde import jsonplus
from pydantic import BaseModel

CALLS: list[tuple[str, Any]] = []
"""``(what was called, its arguments)`` for every call since the last ``reset()``."""
RAN = "the tripwire ran"
MODULE = __name__


def reset() -> None:
    CALLS.clear()


def tripwire(*args: Any, **kwargs: Any) -> str:
    CALLS.append(("tripwire", (args, kwargs)))
    return RAN


class TripwireModel(BaseModel):
    text: str = ""

    def model_post_init(self, context: Any, /) -> None:
        CALLS.append(("TripwireModel", self.text))

    @classmethod
    def method(cls, value: Any) -> str:
        CALLS.append(("TripwireModel.method", value))
        return RAN


@dataclass
class TripwireRecord:
    text: str = ""

    def __post_init__(self) -> None:
        CALLS.append(("TripwireRecord", self.text))


def _ext(code: int, *parts: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb(parts, option=ormsgpack.OPT_NON_STR_KEYS))


FOREIGN_EXTS: dict[str, tuple[ormsgpack.Ext, str]] = {
    "constructor, one argument": (
        _ext(jsonplus.EXT_CONSTRUCTOR_SINGLE_ARG, MODULE, "tripwire", "planted"),
        f"{MODULE}.tripwire",
    ),
    "constructor, positional": (
        _ext(jsonplus.EXT_CONSTRUCTOR_POS_ARGS, MODULE, "tripwire", ["planted"]),
        f"{MODULE}.tripwire",
    ),
    "constructor, keywords": (
        _ext(jsonplus.EXT_CONSTRUCTOR_KW_ARGS, MODULE, "TripwireRecord", {"text": "planted"}),
        f"{MODULE}.TripwireRecord",
    ),
    "method": (
        _ext(jsonplus.EXT_METHOD_SINGLE_ARG, MODULE, "TripwireModel", "planted", "method"),
        f"{MODULE}.TripwireModel.method",
    ),
    "pydantic v1": (
        _ext(jsonplus.EXT_PYDANTIC_V1, MODULE, "TripwireModel", {"text": "planted"}),
        f"{MODULE}.TripwireModel",
    ),
    "pydantic v2": (
        _ext(
            jsonplus.EXT_PYDANTIC_V2,
            MODULE,
            "TripwireModel",
            {"text": "planted"},
            "model_validate_json",
        ),
        f"{MODULE}.TripwireModel",
    ),
}
"""Extension values naming a tripwire, by LangGraph's extension code, with the name a refusal
gives."""

FOREIGN_EXT, FOREIGN_NAME = FOREIGN_EXTS["constructor, one argument"]
"""The one most tests plant: ``tripwire("planted")`` if anything calls it."""


class Kept:
    """An extension value ``raw`` kept undecoded: its code and payload, to edit and repack."""

    __slots__ = ("code", "data")

    def __init__(self, code: int, data: bytes) -> None:
        self.code = code
        self.data = data


def _repack(value: Any) -> ormsgpack.Ext:
    if isinstance(value, Kept):
        return ormsgpack.Ext(value.code, value.data)
    raise TypeError(type(value).__name__)


def packed(value: Any) -> bytes:
    """``value`` as msgpack, its extension values (``ormsgpack.Ext``, ``Kept``) as they are."""
    return ormsgpack.packb(value, default=_repack, option=ormsgpack.OPT_NON_STR_KEYS)


def raw(data: bytes) -> Any:
    """msgpack ``data`` read with every extension value kept undecoded (``Kept``)."""
    return ormsgpack.unpackb(data, ext_hook=Kept, option=ormsgpack.OPT_NON_STR_KEYS)


FOREIGN_ENVELOPES: dict[str, tuple[dict[str, Any], str]] = {
    "lc 2, a dataclass": (
        {
            "lc": 2,
            "type": "constructor",
            "id": [*MODULE.split("."), "TripwireRecord"],
            "kwargs": {"text": "planted"},
        },
        f"{MODULE}.TripwireRecord",
    ),
    "lc 1, not a message": (
        {
            "lc": 1,
            "type": "constructor",
            "id": ["langchain_core", "prompts", "prompt", "PromptTemplate"],
            "kwargs": {"template": "planted {x}", "input_variables": ["x"]},
        },
        "langchain_core.prompts.prompt.PromptTemplate",
    ),
}
"""LangChain constructor envelopes (the Redis serializer's JSON) naming a type threadkeeper
does not store, with the name a refusal gives."""
