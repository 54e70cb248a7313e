"""``compact``: the blog design's destructive compaction, in ``before_model``.

When the history no longer fits the budget (or holds empty AI messages or oversized tool
results), the state's messages are replaced by what the ``Compactor`` keeps:
``RemoveMessage(REMOVE_ALL_MESSAGES)`` followed by the kept list. Only for profiles whose
transcript lives outside the checkpoints (``redis-mysql``).
"""

from __future__ import annotations

from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.runtime import Runtime

from threadkeeper.domain.compaction import WindowCompactor
from threadkeeper.domain.summary import Summary
from threadkeeper.hooks.settings import HookSettings, ThreadState, state_summary


class CompactMiddleware(AgentMiddleware[ThreadState]):
    """Rewrites the persisted history to the compacted window before each model call."""

    state_schema = ThreadState
    destructive = True

    def __init__(self, settings: HookSettings, target: float = 0.75) -> None:
        super().__init__()
        self.settings = settings
        self.compactor = WindowCompactor(
            settings.policy, max_tool_chars=settings.tool_result_max_chars, target=target
        )

    @classmethod
    def from_settings(cls, settings: HookSettings) -> CompactMiddleware:
        return cls(settings)

    @property
    def name(self) -> str:
        return "compact"

    def before_model(self, state: ThreadState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        summary = Summary.from_state(state_summary(state))
        compaction = self.compactor.compact(
            state["messages"],
            budget=self.settings.budget,
            system=self.settings.system_prompt,
            summary=summary.text if summary else None,
        )
        if not compaction.changed:
            return None
        return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *compaction.kept]}

    async def abefore_model(
        self, state: ThreadState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self.before_model(state, runtime)
