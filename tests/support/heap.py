"""What this process still holds: the strings holding a marker, and the memory a cache holds.

``holding(marker)`` walks every object reachable from the objects the garbage collector
tracks — into untracked containers too (a tuple or dict of strings only), and the keys of
every dict (a dict of ``str`` keys does not report its keys to the collector) — and returns
each string containing ``marker`` with the chain of containers it was first reached through,
so a failure names the cache that holds it. ``deep_size(obj)`` is the memory of the objects
reachable from ``obj``, classes, modules and functions excluded (``sys.getsizeof`` each).
"""

from __future__ import annotations

import gc
import sys
import types
from typing import Any

_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)
_ATOMS = (str, bytes, bytearray, int, float, bool, complex, type(None))


def _referents(obj: Any) -> list[Any]:
    refs = list(gc.get_referents(obj))
    if isinstance(obj, dict):
        refs.extend(obj.keys())
    return refs


def describe(obj: Any) -> str:
    kind = type(obj)
    name = f"{kind.__module__}.{kind.__qualname__}"
    wrapped = getattr(obj, "__wrapped__", None) if not isinstance(obj, type) else None
    if isinstance(obj, types.FunctionType):
        name += f"<{obj.__module__}.{obj.__qualname__}>"
    elif isinstance(obj, types.ModuleType):
        name += f"<{obj.__name__}>"
    elif wrapped is not None and hasattr(wrapped, "__qualname__"):
        name += f"<{wrapped.__module__}.{wrapped.__qualname__}>"
    return name


def holding(marker: str, *, besides: tuple[Any, ...] = ()) -> list[str]:
    """Every string reachable in this process that contains ``marker`` (not ``besides``, the
    caller's own, by identity), each described as ``'…' (n chars) <- holder <- …``."""
    gc.collect()
    skip = {id(o) for o in besides}
    parent: dict[int, Any] = {}
    seen: set[int] = set()
    found: list[str] = []
    stack = gc.get_objects()
    # the walk's own state is not what it looks for
    seen.update((id(stack), id(parent), id(seen), id(found), id(skip)))
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, str):
            if marker in obj and id(obj) not in skip:
                found.append(obj)
            continue
        if isinstance(obj, _ATOMS):
            continue
        for ref in _referents(obj):
            if id(ref) not in seen:
                parent.setdefault(id(ref), obj)
                stack.append(ref)
    out = []
    for text in found:
        chain: list[str] = []
        at = parent.get(id(text))
        while at is not None and len(chain) < 16:
            chain.append(describe(at))
            at = parent.get(id(at))
        shown = text if len(text) <= 60 else text[:57] + "..."
        out.append(f"{shown!r} ({len(text)} chars) <- " + " <- ".join(chain))
    return out


def deep_size(*roots: Any) -> int:
    """Bytes of the objects reachable from ``roots`` (each counted once; classes, modules,
    functions and code left out: they are shared, not held by a cache)."""
    seen: set[int] = set()
    total = 0
    stack = list(roots)
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SHARED):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if not isinstance(obj, _ATOMS):
            stack.extend(_referents(obj))
    return total
