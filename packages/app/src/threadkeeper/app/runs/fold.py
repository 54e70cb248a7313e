"""The ``summary`` follow-up of a stored round: older turns folded ahead of need.

When a thread has grown so that its next run will have to fold older turns into the rolling
summary, the round that grew it records a ``summary`` follow-up. A worker makes the fold after
the acknowledgement — a model call when the model is real — and keeps it *apart from the
checkpoints*, as the thread's ``AheadSummary`` row: follow-up work is never a second writer of
the thread's state, so it never holds the thread's claim and never makes a run wait or refuses
one. The next run's ``summarize`` hook takes the row when it continues the state's summary and
covers what that run must fold (``hooks.summarize``); the fold is then part of the run's own
round, stored with it. The invariant of the window holds either way: the new summary covers
every message before the window and none in it.

The fold is planned for the system message the round's run was sent (its prompt, memory and
retrieved documents: the next ones are expected to be alike). A round records the work once the
runs ahead, each adding what the newest turn did, would leave less free than
``domain.summary.fold_budgets`` keeps: the fold is made while the next runs run (the next one
starts the instant the answer ends), so it is made for the ``AHEAD_RUNS``-th run from now. The
fold leaves more free than that: two turns more, and ``FOLD_AHEAD_HEADROOM`` of the room. It is
not made again while a fold made earlier still leaves the runs ahead room. A run that brings
more than that needs a fold beyond the one made ahead: it folds the rest itself and waits for it
(``threadkeeper.summary.folds{fold="in_run"}``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from threadkeeper.app.stored import chunk_lookup
from threadkeeper.domain.errors import ContextOverflow, MessageTooLarge
from threadkeeper.domain.followups import FollowUp
from threadkeeper.domain.prompt import prompt_as_sent
from threadkeeper.domain.summary import (
    AHEAD_RUNS,
    AheadSummary,
    SummariesAhead,
    Summary,
    ahead_reach,
    fold_ahead_plan,
    fold_budgets,
    index_of,
)
from threadkeeper.hooks import HookSettings, ModelSummarizer
from threadkeeper.hooks.settings import state_summary

Write = Callable[[], Awaitable[None]]
SystemOf = Callable[[FollowUp], Awaitable[str | None]]
"""The system message the run of a follow-up's round was sent (``None``: the round is gone)."""


def run_system(runs: Any, knowledge: Any) -> SystemOf:
    """``SummaryJob.system_of`` from the run records (``runs``) and the knowledge base their
    documents came from."""

    async def system_of(job: FollowUp) -> str | None:
        record = await runs.get(job.thread_key, job.run_id)
        if record is None:
            return None
        lookup = chunk_lookup(knowledge, record.tenant_id)
        return prompt_as_sent(record.system_prompt, record.chunk_ids, lookup)

    return system_of


class FoldPlan:
    """What a fold ahead of a thread's state folds (``SummaryJob.plan``)."""

    __slots__ = ("fold", "history", "summary", "through")

    def __init__(
        self,
        history: Sequence[BaseMessage],
        summary: Summary | None,
        fold: list[BaseMessage],
        through: str | None,
    ) -> None:
        self.history = history
        self.summary = summary
        self.fold = fold
        self.through = through

    @property
    def base_version(self) -> int:
        return self.summary.version if self.summary else 0


class SummaryJob:
    """Folds a thread's older turns ahead of its next run (see the module docstring)."""

    def __init__(
        self,
        agent: Any,
        settings: HookSettings,
        summaries: SummariesAhead,
        system_of: SystemOf | None = None,
    ) -> None:
        self.agent = agent
        self.settings = settings
        self.summaries = summaries
        self.system_of = system_of
        """The system message a job's run was sent (``None``: the configured prompt alone)."""

    def plan(
        self, values: Mapping[str, Any], system: str | None = None, *, wanted: bool = False
    ) -> FoldPlan:
        """The fold ahead of the thread state ``values``: the messages the runs ahead are
        expected to need folded that the state's summary does not cover (none yet: an empty
        ``fold``), for runs sent the system message ``system`` (the last run's). ``wanted``:
        only what must be folded for the runs ahead to fit (``fold_budgets``' first budget);
        otherwise the fold to make, which leaves more room (its second)."""
        history: Sequence[BaseMessage] = values.get("messages") or ()
        summary = Summary.from_state(state_summary(values))
        settings = self.settings
        system = settings.system_prompt if system is None else system
        want, leave = fold_budgets(
            history,
            budget=settings.budget - settings.summary_tokens,
            system=system,
            counter=settings.policy.counter,
        )
        try:
            budget = want if wanted else leave
            window = settings.policy.window(history, budget=budget, system=system)
        except (MessageTooLarge, ContextOverflow):
            return FoldPlan(history, summary, [], None)  # the run decides: no room for a summary
        # the fold is made for the AHEAD_RUNS-th run from now, which brings as many turns: the
        # fold may count them (a run takes the fold only once it must fold itself, which it
        # may only past ``summary_after_turns``)
        after_turns = max(0, settings.summary_after_turns - AHEAD_RUNS)
        fold, through = fold_ahead_plan(history, summary, window.start, after_turns=after_turns)
        return FoldPlan(history, summary, fold, through)

    def wanted(self, values: Mapping[str, Any], system: str | None = None) -> bool:
        """Whether a round that left the thread in state ``values``, its run sent the system
        message ``system``, leaves a fold to make: the runs ahead would not fit with room to
        spare (``fold_budgets``)."""
        return bool(self.plan(values, system, wanted=True).fold)

    async def prepare(self, job: FollowUp, *, last: bool) -> Write | None:
        """The fold of the thread's current state, made (``None``: nothing to fold — the
        thread is gone, or a fold made earlier already covers it). ``last``: the final attempt,
        where a model that fails lets the offline summarizer fold instead of failing again.

        Raises:
            Exception: the model call (or a read) failed: the worker retries.
        """
        system = None
        if self.system_of is not None:
            system = await self.system_of(job)
            if system is None:
                return None  # the round is gone (its thread deleted)
        state = await self.agent.aget_state({"configurable": {"thread_id": job.thread_key}})
        plan = self.plan(state.values or {}, system)
        if not plan.fold or plan.through is None:
            return None
        history, fold = plan.history, plan.fold
        previous = plan.summary.text if plan.summary else None
        made = await self.summaries.ahead(job.thread_key)
        covered = ahead_reach(made, plan.summary, history)
        if made is not None and covered is not None:
            # a fold made earlier that still leaves the runs ahead room is kept: a thread is
            # not folded again after every round (each fold is a model call)
            enough = self.plan(state.values or {}, system, wanted=True)
            needed = index_of(history, enough.through) if enough.through else -1
            if needed is not None and covered >= needed:
                return None
            if fold and covered >= (index_of(history, fold[0].id) or 0):
                previous = made.text  # continue the fold made earlier: fold only what follows
                fold = [m for m in fold if (index_of(history, m.id) or 0) > covered]
        summarizer = self.settings.summarizer
        assert summarizer is not None  # HookSettings fills it in
        max_tokens = self.settings.summary_tokens
        if isinstance(summarizer, ModelSummarizer):
            text = await summarizer.summarize(previous, fold, max_tokens=max_tokens, fall_back=last)
        else:
            text = await summarizer.summarize(previous, fold, max_tokens=max_tokens)
        row = AheadSummary(base_version=plan.base_version, through_id=plan.through, text=text)

        async def write() -> None:
            await self.summaries.keep(job.thread_key, job.tenant_id, job.user_id, row)

        return write
