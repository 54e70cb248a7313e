"""Summaries folded ahead of need on the in-memory backend (issue 27): the round that grows a
thread past what its next window holds records ``summary`` follow-up work with it; a worker
folds after the acknowledgement, apart from the checkpoints; the next run takes the fold and
makes no summary call of its own; deleting the thread or erasing its user first leaves
nothing of it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from tests.support import metrics
from tests.unit.app.test_run_service import CALLER, request, service_with
from threadkeeper.adapters.builtin_model import BuiltinChatModel
from threadkeeper.app.runs import RunService
from threadkeeper.conformance.in_memory import InMemoryBackend
from threadkeeper.domain.followups import SUMMARY

QUESTIONS = [
    "Is dental treatment covered by my health insurance?",
    "How do I file a claim for a hospital stay abroad?",
    "Does my policy cover physiotherapy after an accident?",
    "What is the waiting period for orthodontic treatment?",
    "Are glasses and contact lenses reimbursed?",
    "How do I add my newborn child to the policy?",
    "Is a second medical opinion covered?",
    "What happens to my cover if I move to another country?",
    "Can I change my deductible during the year?",
    "Are vaccinations for travel covered?",
]
SMALL = {"token_budget": 1500, "summary_after_turns": 2}


class Counting:
    """The service's summarizer, its calls counted (in runs and in follow-up work alike)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    async def summarize(
        self, previous: str | None, messages: Sequence[BaseMessage], *, max_tokens: int
    ) -> str:
        self.calls += 1
        text: str = await self.inner.summarize(previous, messages, max_tokens=max_tokens)
        return text


def counted(service: RunService) -> Counting:
    job = service.summary_job
    assert job is not None, "the summarize hook is on: folds are made ahead"
    counting = Counting(job.settings.summarizer)
    job.settings.summarizer = counting  # the hooks' settings: the runs' folds are counted too
    return counting


def folds(fold: str, profile: str) -> float:
    return metrics.total("threadkeeper.summary.folds", fold=fold, profile=profile)


async def test_a_grown_thread_is_folded_ahead_and_its_next_run_takes_the_fold(
    memory_profile: str,
) -> None:
    backend = InMemoryBackend()
    service = service_with(BuiltinChatModel(), backend, memory_profile, **SMALL)
    counting = counted(service)
    name = f"t-{uuid.uuid4().hex[:8]}"
    ahead_before, in_run_before = folds("ahead", memory_profile), folds("in_run", memory_profile)
    recorded = 0
    taken_without_a_call = 0
    for question in QUESTIONS:
        calls = counting.calls
        taken = folds("ahead", memory_profile)
        handle = await service.start_run(CALLER, name, request(question))
        assert (await handle.result()).status == "answered"
        if folds("ahead", memory_profile) > taken:
            taken_without_a_call += counting.calls == calls
        # recorded with the round, before any worker ran
        recorded += backend.followups.kinds_to_do().count(SUMMARY)
        await service.wait_idle()  # the worker folds, after the acknowledgement
    assert recorded >= 1, "a grown thread records a fold to make ahead"
    assert folds("ahead", memory_profile) - ahead_before >= 1, "a run took a fold made ahead"
    assert taken_without_a_call >= 1, "a run that took a fold made ahead made no summary call"
    in_run = folds("in_run", memory_profile) - in_run_before
    ahead = folds("ahead", memory_profile) - ahead_before
    assert in_run <= ahead, f"runs folded themselves {in_run} times, took {ahead} folds ahead"


async def test_deleting_a_thread_with_a_fold_pending_leaves_nothing_of_it(
    memory_profile: str,
) -> None:
    backend = InMemoryBackend()
    service = service_with(BuiltinChatModel(), backend, memory_profile, **SMALL)
    name = f"t-{uuid.uuid4().hex[:8]}"
    for question in QUESTIONS[:6]:
        handle = await service.start_run(CALLER, name, request(question))
        assert (await handle.result()).status == "answered"
        if SUMMARY in backend.followups.kinds_to_do():
            break
    assert SUMMARY in backend.followups.kinds_to_do(), "a fold was left to make"
    await service.delete_thread(CALLER, name)
    await service.wait_idle()
    assert backend.summaries.rows == {}, "a fold was kept for a deleted thread"
    assert SUMMARY not in backend.followups.kinds_to_do()
