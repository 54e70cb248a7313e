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
from langchain_core.messages import HumanMessage
from langgraph.config import get_config
from langgraph.types import Command

from threadkeeper.domain.errors import ContextOverflow, MessageTooLarge
from threadkeeper.domain.summary import (
    ExtractiveSummarizer,
    Summary,
    ahead_reach,
    fold_budgets,
    index_of,
    messages_to_fold,
)
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

    def _to_fold(
        self, request: ModelRequest[Any]
    ) -> tuple[Summary | None, list[Any], str | None, int]:
        """(the summary so far, the messages to fold into it, the id of the newest message
        the new summary covers — the last one before the window it is folded for —, where
        that window starts)."""
        summary = Summary.from_state(state_summary(request.state))
        reserve = self.settings.summary_tokens
        try:
            window = self.settings.policy.window(
                request.messages,
                budget=self.settings.budget - reserve,
                system=system_text(request.system_message),
            )
        except (MessageTooLarge, ContextOverflow):
            return summary, [], None, 0  # no room for a summary this call; trim decides the rest
        fold = messages_to_fold(
            request.messages,
            window.start,
            summary,
            after_turns=self.settings.summary_after_turns,
        )
        if not fold:
            return summary, [], None, window.start
        # a fold is due: fold for a window with room to spare (``fold_budgets``), so that the
        # next runs need none for a while — the time a fold made ahead by follow-up work needs
        start = self._roomier(request, window.start, reserve)
        fold = messages_to_fold(
            request.messages, start, summary, after_turns=self.settings.summary_after_turns
        )
        return summary, fold, request.messages[start - 1].id, window.start

    def _roomier(self, request: ModelRequest[Any], start: int, reserve: int) -> int:
        """Where the window would start with the room a fold made ahead leaves
        (``fold_budgets``) — never cutting into the newest turn — or ``start`` when that
        cannot be had."""
        messages = request.messages
        newest = max(
            (i for i in range(len(messages) - 1, -1, -1) if isinstance(messages[i], HumanMessage)),
            default=None,
        )
        if newest is None:
            return start
        system = system_text(request.system_message)
        policy = self.settings.policy
        _, leave = fold_budgets(
            messages, budget=self.settings.budget - reserve, system=system, counter=policy.counter
        )
        try:
            roomy = policy.window(messages, budget=leave, system=system)
        except (MessageTooLarge, ContextOverflow):
            return start
        return roomy.start if start <= roomy.start <= newest else start

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
        summary, fold, through, _ = self._to_fold(request)
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
        summary, fold, through, start = self._to_fold(request)
        if not fold:
            return await handler(request)
        ahead = await self._ahead(request, summary)
        previous = summary.text if summary else None
        if ahead is not None:
            covered = index_of(request.messages, ahead.through_id)
            assert covered is not None  # _ahead checked it
            if covered >= start - 1:  # folded ahead as far as this call needs, or further
                request, new = self._updated(request, summary, ahead.text, ahead.through_id)
                self.settings.note("summary_ahead")
                return self._respond(await handler(request), new)
            # behind: the rest is folded here, onto it (the run waits for this fold)
            previous = ahead.text
            fold = [m for m in fold if (index_of(request.messages, m.id) or 0) > covered]
        assert self.settings.summarizer is not None
        text = await self.settings.summarizer.summarize(
            previous, fold, max_tokens=self.settings.summary_tokens
        )
        request, new = self._updated(request, summary, text, through)
        self.settings.note("summary_fold")
        return self._respond(await handler(request), new)

    async def _ahead(self, request: ModelRequest[Any], summary: Summary | None) -> Any:
        """The fold made ahead for this thread (``HookSettings.ahead``), if it continues the
        state's summary and covers messages the history still has; else ``None``."""
        if self.settings.ahead is None:
            return None
        try:
            thread_key = get_config().get("configurable", {}).get("thread_id")
        except RuntimeError:  # called outside a graph run: no thread to look up
            return None
        if not thread_key:
            return None
        found = await self.settings.ahead.ahead(str(thread_key))
        return found if ahead_reach(found, summary, request.messages) is not None else None
