"""``truncate_tool_results``: the model sees long tool results cut; state keeps them whole."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AnyMessage

from threadkeeper.domain.compaction import truncate_tool_results
from threadkeeper.hooks.settings import HookSettings


class TruncateToolResultsMiddleware(AgentMiddleware):
    """Cuts tool results over ``max_chars`` in the model request (non-destructive).

    Destructive truncation — the blog's, persisted in the checkpoint — is part of ``compact``.
    """

    def __init__(self, max_chars: int = 2000) -> None:
        super().__init__()
        if max_chars < 1:
            raise ValueError("max_chars must be positive")
        self.max_chars = max_chars

    @classmethod
    def from_settings(cls, settings: HookSettings) -> TruncateToolResultsMiddleware:
        return cls(settings.tool_result_max_chars)

    @property
    def name(self) -> str:
        return "truncate_tool_results"

    def _apply(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        messages, cut = truncate_tool_results(request.messages, self.max_chars)
        return request.override(messages=cast("list[AnyMessage]", messages)) if cut else request

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
