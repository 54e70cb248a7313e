"""Hook plugins: the ``threadkeeper.hooks`` entry-point group and ``THREADKEEPER_HOOKS``.

A plugin is a class with ``from_settings(settings: HookSettings) -> AgentMiddleware``. A
third-party package registers one under the same group and names it in ``THREADKEEPER_HOOKS``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from importlib.metadata import entry_points
from typing import Any, Protocol

from langchain.agents.middleware import AgentMiddleware

from threadkeeper.hooks.settings import HookSettings

ENTRY_POINT_GROUP = "threadkeeper.hooks"
DEFAULT_HOOKS = "truncate_tool_results,summarize,trim"
DESTRUCTIVE_DEFAULT_HOOKS = "truncate_tool_results,compact"


class HookPlugin(Protocol):
    @classmethod
    def from_settings(cls, settings: HookSettings) -> AgentMiddleware[Any, Any]: ...


class HookConfigError(ValueError):
    """``THREADKEEPER_HOOKS`` names an unknown hook or an order that cannot work."""


def available_hooks() -> dict[str, type[HookPlugin]]:
    """Every installed hook plugin by name."""
    return {ep.name: ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)}


def parse_hook_names(spec: str | Sequence[str]) -> list[str]:
    names = [n.strip() for n in spec.split(",")] if isinstance(spec, str) else list(spec)
    return [n for n in names if n]


def build_pipeline(
    spec: str | Sequence[str],
    settings: HookSettings,
    *,
    allow_destructive: bool,
    plugins: Mapping[str, type[HookPlugin]] | None = None,
) -> list[AgentMiddleware[Any, Any]]:
    """The middleware list for ``create_agent``, in the configured order.

    Raises:
        HookConfigError: an unknown or repeated name; ``summarize`` after ``trim``; a
            destructive hook where the transcript is the checkpoint (it would delete the record).
    """
    names = parse_hook_names(spec)
    plugins = available_hooks() if plugins is None else plugins
    unknown = [n for n in names if n not in plugins]
    if unknown:
        raise HookConfigError(
            f"unknown hook(s) {', '.join(unknown)}; installed: {', '.join(sorted(plugins))}"
        )
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise HookConfigError(f"hook(s) named more than once: {', '.join(repeated)}")
    if "summarize" in names and "trim" in names and names.index("summarize") > names.index("trim"):
        raise HookConfigError("summarize must come before trim: trim sends the summary")
    middleware = [plugins[n].from_settings(settings) for n in names]
    destructive = [
        n for n, m in zip(names, middleware, strict=True) if getattr(m, "destructive", False)
    ]
    for middleware_ in middleware:
        if "trim" in names and hasattr(middleware_, "shows_window"):
            middleware_.shows_window = False  # trim shows (and reports) the window
        if "summarize" in names and hasattr(middleware_, "summarizes"):
            middleware_.summarizes = True  # compaction folds what it drops into the summary
    if destructive and not allow_destructive:
        raise HookConfigError(
            f"{', '.join(destructive)} deletes persisted messages, and on this profile the "
            "checkpoints are the transcript; use trim (and summarize) instead"
        )
    return middleware
