"""What every threadkeeper hook is built from: one settings object, shared by the pipeline."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired

from langchain.agents.middleware import AgentState
from langchain_core.messages import SystemMessage

from threadkeeper.domain.history import TurnWindowPolicy, Window
from threadkeeper.domain.summary import ExtractiveSummarizer, SummariesAhead, Summarizer
from threadkeeper.domain.tokens import TiktokenCounter, TokenCounter


class ThreadState(AgentState[Any]):
    """Agent state with the rolling summary (``threadkeeper.domain.summary.Summary`` as a dict)."""

    summary: NotRequired[dict[str, Any] | None]


WindowObserver = Callable[[Window], None]
HookEvent = Literal["summary_fold", "summary_ahead", "compaction"]
EventObserver = Callable[[HookEvent], None]


@dataclass(slots=True)
class HookSettings:
    """Budget, counter and rules the hooks share (``THREADKEEPER_*`` settings)."""

    budget: int = 8000
    counter: TokenCounter = field(default_factory=TiktokenCounter)
    summary_after_turns: int = 20
    summary_share: float = 0.25
    """Largest part of the budget the rolling summary may take."""
    tool_result_max_chars: int = 2000
    summarizer: Summarizer | None = None
    """``None``: the offline extractive summarizer."""
    system_prompt: str = ""
    """The agent's system prompt, for hooks that run where the model request is not visible
    (``compact`` runs before the model node)."""
    observer: WindowObserver | None = None
    """Called with every window the model is shown (per-run records, replay)."""
    on_event: EventObserver | None = None
    """Called when a hook folds older turns into the summary (``summary_fold``: in the run, a
    model call it waits for; ``summary_ahead``: a fold made after an earlier round taken) or
    compacts the history (metrics)."""
    ahead: SummariesAhead | None = None
    """Folds made ahead by follow-up work (``domain.summary.SummariesAhead``): ``summarize``
    takes one instead of folding in the run when it covers what the run must fold."""

    _policy: TurnWindowPolicy | None = field(default=None, init=False, repr=False, compare=False)
    """The policy of ``counter``, kept: it keeps each thread's turn index between runs."""

    def note(self, event: HookEvent) -> None:
        """Report ``event`` to ``on_event``, if anyone listens."""
        if self.on_event is not None:
            self.on_event(event)

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError("budget must be positive")
        if self.summary_after_turns < 0:
            raise ValueError("summary_after_turns must not be negative")
        if self.tool_result_max_chars < 1:
            raise ValueError("tool_result_max_chars must be positive")
        if not 0 < self.summary_share < 1:
            raise ValueError("summary_share must be between 0 and 1")
        if self.summarizer is None:
            self.summarizer = ExtractiveSummarizer(self.counter)

    @property
    def policy(self) -> TurnWindowPolicy:
        """The one policy of ``counter`` (made again if the counter is replaced)."""
        policy = self._policy
        if policy is None or policy.counter is not self.counter:
            policy = self._policy = TurnWindowPolicy(self.counter)
        return policy

    @property
    def summary_tokens(self) -> int:
        return int(self.budget * self.summary_share)


def state_summary(state: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The ``summary`` field of agent state, if it holds one."""
    value = state.get("summary")
    return value if isinstance(value, Mapping) else None


def system_text(message: SystemMessage | None) -> str:
    return message.text if message is not None else ""


def with_summary(system: SystemMessage | None, summary: str | None) -> SystemMessage | None:
    """The system message the model gets: the prompt, then the summary (one system message,
    since some providers accept only one, at the start)."""
    if not summary:
        return system
    text = system_text(system)
    return SystemMessage(content=f"{text}\n\n{summary}" if text else summary)
