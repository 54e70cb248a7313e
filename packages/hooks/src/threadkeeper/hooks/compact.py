"""``compact``: the blog design's destructive compaction, in ``before_model``.

When the history no longer fits the budget (or holds empty AI messages or oversized tool
results), the state's messages are replaced by what the ``Compactor`` keeps:
``RemoveMessage(REMOVE_ALL_MESSAGES)`` followed by the kept list. Only for profiles whose
transcript lives outside the checkpoints (``redis-mysql``).

With ``summarize`` also in the pipeline, the human and AI messages a compaction drops are first
folded into the rolling summary (``summarize`` itself works at the model call, after this hook
has already dropped them, so it would never see them).

At the model call it then does what ``trim`` does (the policy's window of the — already
compacted — history, with the rolling summary, reported as the run's record of what the model
saw), unless the pipeline also has ``trim``, which then does it (``shows_window = False``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime

from threadkeeper.domain.compaction import Compaction, WindowCompactor
from threadkeeper.domain.summary import ExtractiveSummarizer, Summary, messages_to_fold
from threadkeeper.hooks.settings import HookSettings, ThreadState, state_summary
from threadkeeper.hooks.trim import show_window


class CompactMiddleware(AgentMiddleware[ThreadState]):
    """Rewrites the persisted history to the compacted window before each model call."""

    state_schema = ThreadState
    destructive = True

    def __init__(self, settings: HookSettings, target: float = 0.75) -> None:
        super().__init__()
        self.settings = settings
        self.shows_window = True
        self.summarizes = False
        """Set by the pipeline when it also has ``summarize``: what compaction drops is folded
        into the rolling summary first (otherwise it is simply gone from the checkpoints)."""
        self.compactor = WindowCompactor(
            settings.policy, max_tool_chars=settings.tool_result_max_chars, target=target
        )

    @classmethod
    def from_settings(cls, settings: HookSettings) -> CompactMiddleware:
        return cls(settings)

    @property
    def name(self) -> str:
        return "compact"

    def _compact(
        self, state: ThreadState
    ) -> tuple[Compaction, Summary | None, list[Any], str | None]:
        summary = Summary.from_state(state_summary(state))
        history = state["messages"]
        compaction = self.compactor.compact(
            history,
            budget=self.settings.budget,
            system=self.settings.system_prompt,
            summary=summary.text if summary else None,
        )
        fold: list[Any] = []
        through = None
        if compaction.changed and self.summarizes:
            kept = {m.id for m in compaction.kept}
            start = next((i for i, m in enumerate(history) if m.id in kept), len(history))
            fold = messages_to_fold(history, start, summary, after_turns=0)
            through = history[start - 1].id if fold else None  # tool results included
        return compaction, summary, fold, through

    @staticmethod
    def _update(
        compaction: Compaction, summary: Summary | None, text: str | None, through: str | None
    ) -> dict[str, Any]:
        update: dict[str, Any] = {
            "messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *compaction.kept]
        }
        if text is not None and through is not None:
            version = (summary.version if summary else 0) + 1
            update["summary"] = Summary(text, version, through).to_state()
        return update

    def before_model(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        compaction, summary, fold, through = self._compact(state)
        if not compaction.changed:
            return None
        text = None
        if fold:
            summarizer = self.settings.summarizer
            if not isinstance(summarizer, ExtractiveSummarizer):
                raise NotImplementedError("a model summarizer needs the async agent API")
            text = summarizer.fold(
                summary.text if summary else None, fold, max_tokens=self.settings.summary_tokens
            )
        self.settings.note("compaction")
        if text is not None:
            self.settings.note("summary_fold")
        return self._update(compaction, summary, text, through)

    async def abefore_model(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        compaction, summary, fold, through = self._compact(state)
        if not compaction.changed:
            return None
        text = None
        if fold and self.settings.summarizer is not None:
            text = await self.settings.summarizer.summarize(
                summary.text if summary else None, fold, max_tokens=self.settings.summary_tokens
            )
        self.settings.note("compaction")
        if text is not None:
            self.settings.note("summary_fold")
        return self._update(compaction, summary, text, through)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any]:
        return handler(show_window(self.settings, request) if self.shows_window else request)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        return await handler(show_window(self.settings, request) if self.shows_window else request)
