"""``summarize``: ADR-0007's rolling summary, kept in the ``summary`` state field.

Once a thread has more than ``summary_after_turns`` turns, the messages that fall out of the
window are folded into the summary before the model call; the new summary reaches the inner
hooks (``trim`` sends it) and is written to state with the model's answer. The persisted
messages are untouched.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ExtendedModelResponse
from langgraph.types import Command

from threadkeeper.domain.errors import ContextOverflow, MessageTooLarge
from threadkeeper.domain.summary import ExtractiveSummarizer, Summary, messages_to_fold
from threadkeeper.hooks.settings import HookSettings, ThreadState, state_summary, system_text


class SummarizeMiddleware(AgentMiddleware[ThreadState]):
    """Folds dropped older turns into the rolling summary. Place it before ``trim``."""

    state_schema = ThreadState

    def __init__(self, settings: HookSettings) -> None:
        super().__init__()
        self.settings = settings

    @classmethod
    def from_settings(cls, settings: HookSettings) -> SummarizeMiddleware:
        return cls(settings)

    @property
    def name(self) -> str:
        return "summarize"

    def _to_fold(self, request: ModelRequest[Any]) -> tuple[Summary | None, list[Any], str | None]:
        """(the summary so far, the messages to fold into it, the id of the newest message
        the new summary covers — the last one before the window it is folded for)."""
        summary = Summary.from_state(state_summary(request.state))
        reserve = self.settings.summary_tokens
        try:
            window = self.settings.policy.window(
                request.messages,
                budget=self.settings.budget - reserve,
                system=system_text(request.system_message),
            )
        except (MessageTooLarge, ContextOverflow):
            return summary, [], None  # no room for a summary this call; trim decides the rest
        fold = messages_to_fold(
            request.messages,
            window.start,
            summary,
            after_turns=self.settings.summary_after_turns,
        )
        through = request.messages[window.start - 1].id if fold else None
        return summary, fold, through

    def _updated(
        self,
        request: ModelRequest[Any],
        summary: Summary | None,
        text: str,
        through: str | None,
    ) -> tuple[ModelRequest[Any], Summary]:
        """The request with the new summary, which covers everything before the window it
        was folded for (tool results too, which are not folded: ``trim`` then shows what
        follows it, and nothing falls between the two)."""
        new = Summary(text, (summary.version if summary else 0) + 1, through)
        state = cast("AgentState[Any]", {**request.state, "summary": new.to_state()})
        return request.override(state=state), new

    @staticmethod
    def _respond(response: ModelResponse[Any], new: Summary) -> ExtendedModelResponse[Any]:
        return ExtendedModelResponse(
            model_response=response, command=Command(update={"summary": new.to_state()})
        )

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        summary, fold, through = self._to_fold(request)
        if not fold:
            return handler(request)
        summarizer = self.settings.summarizer
        if not isinstance(summarizer, ExtractiveSummarizer):
            raise NotImplementedError("a model summarizer needs the async agent API (ainvoke)")
        text = summarizer.fold(
            summary.text if summary else None, fold, max_tokens=self.settings.summary_tokens
        )
        request, new = self._updated(request, summary, text, through)
        self.settings.note("summary_fold")
        return self._respond(handler(request), new)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        summary, fold, through = self._to_fold(request)
        if not fold:
            return await handler(request)
        assert self.settings.summarizer is not None
        text = await self.settings.summarizer.summarize(
            summary.text if summary else None, fold, max_tokens=self.settings.summary_tokens
        )
        request, new = self._updated(request, summary, text, through)
        self.settings.note("summary_fold")
        return self._respond(await handler(request), new)
