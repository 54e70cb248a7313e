"""``Compactor`` conformance: what a destructive profile keeps of a thread's history.

What is kept fits the budget in exact tokens, starts on a human message, holds no orphaned
tool call or result and no empty AI message, keeps the newest turn (whole when it fits),
carries oversized tool results cut under a new id; compacting is deterministic (the same input
twice gives the same result) and idempotent (compacting what was kept changes nothing), and
never mutates the history it reads.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from threadkeeper.conformance.history_policy import (
    SUMMARY,
    SYSTEM,
    assert_well_formed,
    budget_sweep,
    conversation,
    corrupted_conversation,
    cost,
    fixed_cost,
    newest_human_index,
    snapshot,
    text,
)
from threadkeeper.domain.compaction import Compaction, Compactor
from threadkeeper.domain.errors import MessageTooLarge
from threadkeeper.domain.tokens import TokenCounter, message_text


def histories() -> list[list[BaseMessage]]:
    """A clean history with long tool results, and a corrupted one."""
    return [conversation(result_repeat=8), corrupted_conversation()]


def content_of(compaction: Compaction) -> list[tuple[str | None, str, str]]:
    return [(m.id, type(m).__name__, message_text(m)) for m in compaction.kept]


class CompactorConformance:
    """Subclass and provide ``compactor`` (a fixture returning a ``Compactor``), ``counter``
    (the counter it budgets with) and ``max_tool_chars`` (its tool-result limit)."""

    def compact(
        self,
        compactor: Compactor,
        history: Sequence[BaseMessage],
        budget: int,
        summary: str | None = SUMMARY,
    ) -> Compaction:
        return compactor.compact(history, budget=budget, system=SYSTEM, summary=summary)

    def test_a_clean_history_that_fits_is_kept_as_it_is(
        self, compactor: Compactor, counter: TokenCounter, max_tool_chars: int
    ) -> None:
        history = conversation(result_repeat=1)
        assert all(
            len(message_text(m)) <= max_tool_chars for m in history if isinstance(m, ToolMessage)
        )
        compaction = self.compact(compactor, history, 10**6)
        assert compaction.kept == tuple(history)
        assert (compaction.dropped, compaction.truncated, compaction.changed) == (0, 0, False)

    def test_what_is_kept_fits_the_budget_and_is_well_formed(
        self, compactor: Compactor, counter: TokenCounter
    ) -> None:
        for history in histories():
            for budget in budget_sweep(counter, history, SYSTEM):
                compaction = self.compact(compactor, history, budget)
                kept = compaction.kept
                exact = fixed_cost(counter, SYSTEM) + sum(cost(counter, m) for m in kept)
                assert exact <= budget, f"kept {exact} tokens for a budget of {budget}"
                assert_well_formed(kept, history)
                assert not any(
                    isinstance(m, AIMessage) and not m.tool_calls and not message_text(m).strip()
                    for m in kept
                ), "an empty AI message was kept"
                assert compaction.dropped == len(history) - len(kept)
                assert compaction.changed == bool(compaction.dropped or compaction.truncated)

    def test_oversized_tool_results_are_cut_under_a_new_id(
        self, compactor: Compactor, counter: TokenCounter, max_tool_chars: int
    ) -> None:
        history = conversation(result_repeat=8)
        originals = {m.tool_call_id: m for m in history if isinstance(m, ToolMessage)}
        assert any(len(message_text(m)) > max_tool_chars for m in originals.values())
        history_ids = {m.id for m in history}
        for budget in budget_sweep(counter, history, SYSTEM, steps=10):
            compaction = self.compact(compactor, history, budget)
            cut = 0
            for message in compaction.kept:
                if not isinstance(message, ToolMessage):
                    assert message.id in history_ids
                    continue
                original = originals[message.tool_call_id]
                full = message_text(original)
                if len(full) <= max_tool_chars:
                    assert message is original
                    continue
                cut += 1
                shown = message_text(message)
                assert shown.startswith(full[:max_tool_chars])
                assert len(shown) < len(full)
                assert message.id not in history_ids, "a changed message needs a new id"
            assert compaction.truncated == cut

    def test_orphans_and_empty_messages_are_dropped(
        self, compactor: Compactor, counter: TokenCounter
    ) -> None:
        history = corrupted_conversation()
        compaction = self.compact(compactor, history, 10**6)
        kept = {m.id for m in compaction.kept}
        assert not kept & {"pre-ai", "pre-orphan", "orphan-1", "empty-ai", "a2-unanswered"}
        assert compaction.changed
        assert compaction.kept[0].id == "h0", "everything from the first human message fits"

    def test_the_newest_human_message_is_always_kept(
        self, compactor: Compactor, counter: TokenCounter
    ) -> None:
        for history in histories():
            newest = history[newest_human_index(history)]
            for budget in budget_sweep(counter, history, SYSTEM):
                kept = self.compact(compactor, history, budget).kept
                humans = [m for m in kept if isinstance(m, HumanMessage)]
                assert humans[-1] is newest

    def test_the_newest_turn_is_kept_whole_when_it_fits(
        self, compactor: Compactor, counter: TokenCounter, max_tool_chars: int
    ) -> None:
        """Compaction runs before a model call mid-run: the tool results the model just asked
        for are in the newest turn, and when the turn fits the budget none of it is deleted."""
        history = conversation(result_repeat=1)  # nothing to cut: every message is kept as is
        assert all(
            len(message_text(m)) <= max_tool_chars for m in history if isinstance(m, ToolMessage)
        )
        newest_turn = history[newest_human_index(history) :]
        needed = fixed_cost(counter, SYSTEM) + sum(cost(counter, m) for m in newest_turn)
        budgets = [b for b in budget_sweep(counter, history, SYSTEM, steps=60) if b >= needed]
        assert len(budgets) > 10
        for budget in budgets:
            kept = self.compact(compactor, history, budget).kept
            assert [m.id for m in kept[-len(newest_turn) :]] == [m.id for m in newest_turn], (
                f"budget {budget}: the newest turn needs {needed} tokens, but compaction kept "
                f"only {[m.id for m in kept]}"
            )

    def test_compacting_is_deterministic(self, compactor: Compactor, counter: TokenCounter) -> None:
        for history in histories():
            copy = [m.model_copy(deep=True) for m in history]
            for budget in budget_sweep(counter, history, SYSTEM, steps=10):
                first = self.compact(compactor, history, budget)
                again = self.compact(compactor, history, budget)
                assert again == first
                assert content_of(again) == content_of(first)
                of_copy = self.compact(compactor, copy, budget)
                assert content_of(of_copy) == content_of(first)
                assert (of_copy.dropped, of_copy.truncated) == (first.dropped, first.truncated)

    def test_compacting_what_was_kept_changes_nothing(
        self, compactor: Compactor, counter: TokenCounter
    ) -> None:
        for history in histories():
            for budget in budget_sweep(counter, history, SYSTEM):
                first = self.compact(compactor, history, budget)
                second = self.compact(compactor, first.kept, budget)
                assert content_of(second) == content_of(first), f"budget {budget}"
                assert not second.changed
                assert (second.dropped, second.truncated) == (0, 0)

    def test_the_history_is_not_mutated(self, compactor: Compactor, counter: TokenCounter) -> None:
        for history in histories():
            before = snapshot(history)
            for budget in budget_sweep(counter, history, SYSTEM, steps=5):
                self.compact(compactor, history, budget)
            assert snapshot(history) == before

    def test_a_newest_message_over_the_budget_is_refused(
        self, compactor: Compactor, counter: TokenCounter
    ) -> None:
        history = [*conversation(turns=2), HumanMessage(text(1, 30), id="h-big")]
        needed = cost(counter, history[-1])
        with pytest.raises(MessageTooLarge):
            self.compact(compactor, history, needed - 1, summary=None)
