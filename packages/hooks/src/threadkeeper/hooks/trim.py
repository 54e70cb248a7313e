"""``trim``: the model sees the newest turns under the budget; persisted state is untouched."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, cast

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage

from threadkeeper.domain.history import Window
from threadkeeper.domain.summary import Summary
from threadkeeper.hooks.settings import (
    HookSettings,
    ThreadState,
    state_summary,
    system_text,
    with_summary,
)


def after_summary(messages: Sequence[AnyMessage], summary: Summary | None) -> int:
    """Where the messages the summary does not cover begin (0: it covers none of them)."""
    if summary is None or summary.through_id is None:
        return 0
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].id == summary.through_id:
            return index + 1
    return 0  # compacted away: everything left is newer than the summary


def before_trim(
    settings: HookSettings,
    window: Window,
    dropped: Sequence[AnyMessage],
    summary: Summary | None,
) -> int:
    """Tokens of what the window was chosen from: the window, the ``dropped`` messages (those
    the summary does not cover, before the window) and a summary it dropped. Counts are cached
    per message: a lookup each, no tokenizing."""
    tokens = window.tokens
    count = settings.counter.count
    tokens += sum(count(m) for m in dropped)
    if summary is not None and window.summary is None:
        tokens += settings.counter.count_system(summary.text)
    return tokens


def show_window(settings: HookSettings, request: ModelRequest[Any]) -> ModelRequest[Any]:
    """The request with the policy's window of its messages and the rolling summary; the
    window is reported to ``settings.observer`` (the per-run record of what the model saw).

    The window is chosen among the messages the summary does not cover: a short summary
    leaves room that older turns would otherwise fill, and they would be sent twice — folded
    into the summary and again as messages."""
    summary = Summary.from_state(state_summary(request.state))
    begin = after_summary(request.messages, summary)
    window = settings.policy.window(
        request.messages,
        budget=settings.budget,
        system=system_text(request.system_message),
        summary=summary.text if summary else None,
        first=begin,
    )
    window = dataclasses.replace(
        window,
        before_trim=before_trim(settings, window, request.messages[begin : window.start], summary),
    )
    if settings.observer is not None:
        settings.observer(window)
    return request.override(
        messages=cast("list[AnyMessage]", list(window.messages)),
        system_message=with_summary(request.system_message, window.summary),
    )


class TrimMiddleware(AgentMiddleware[ThreadState]):
    """ADR-0007's pre-model trimming through ``TurnWindowPolicy``, with the rolling summary.

    Raises ``MessageTooLarge`` when the newest human message alone is over budget.
    """

    state_schema = ThreadState

    def __init__(self, settings: HookSettings) -> None:
        super().__init__()
        self.settings = settings

    @classmethod
    def from_settings(cls, settings: HookSettings) -> TrimMiddleware:
        return cls(settings)

    @property
    def name(self) -> str:
        return "trim"

    def _apply(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        return show_window(self.settings, request)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        return handler(self._apply(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        return await handler(self._apply(request))
