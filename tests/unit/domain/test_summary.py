"""The rolling summary: what is folded, and the offline extractive summarizer."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from threadkeeper.domain.summary import (
    SUMMARY_HEADING,
    ExtractiveSummarizer,
    Summary,
    count_turns,
    first_sentence,
    messages_to_fold,
    more_turns_than,
)
from threadkeeper.domain.tokens import CharacterCounter, TiktokenCounter


def thread(turns: int) -> list[BaseMessage]:
    """``turns`` turns of a question, a tool round trip and an answer (4 messages each)."""
    history: list[BaseMessage] = []
    for n in range(turns):
        history += [
            HumanMessage(f"question {n}", id=f"h{n}"),
            AIMessage(
                "", tool_calls=[{"name": "search", "args": {"n": n}, "id": f"c{n}"}], id=f"c{n}"
            ),
            ToolMessage(f"result {n}", tool_call_id=f"c{n}", id=f"t{n}"),
            AIMessage(f"answer {n}", id=f"a{n}"),
        ]
    return history


def ids(messages: list[BaseMessage]) -> list[str | None]:
    return [m.id for m in messages]


# --- what to fold ----------------------------------------------------------------------------


def test_count_turns_counts_human_messages() -> None:
    assert count_turns(thread(7)) == 7
    assert count_turns([]) == 0


@pytest.mark.parametrize("turns", [0, 1, 6, 7, 8, 30])
def test_more_turns_than_is_count_turns_compared(turns: int) -> None:
    for history in (thread(7), [], thread(7)[:-3]):
        assert more_turns_than(history, turns) == (count_turns(history) > turns)


def test_more_turns_than_stops_reading_once_it_knows() -> None:
    class Endless(list[BaseMessage]):
        def __iter__(self):  # type: ignore[no-untyped-def]
            n = 0
            while True:
                yield HumanMessage("q", id=f"h{n}")
                n += 1

    assert more_turns_than(Endless(), 20)


def test_nothing_is_folded_until_the_thread_has_more_than_after_turns() -> None:
    history = thread(5)
    assert messages_to_fold(history, window_start=16, summary=None, after_turns=5) == []
    assert messages_to_fold(history, window_start=16, summary=None, after_turns=4) != []


def test_only_human_and_ai_messages_before_the_window_are_folded() -> None:
    history = thread(6)
    fold = messages_to_fold(history, window_start=8, summary=None, after_turns=5)
    # turns 0 and 1: their human messages, tool-calling AI messages and answers (no results)
    assert ids(fold) == ["h0", "c0", "a0", "h1", "c1", "a1"]
    assert not any(isinstance(m, ToolMessage) for m in fold)


def test_only_what_the_summary_does_not_cover_yet_is_folded() -> None:
    history = thread(6)
    summary = Summary("…", version=3, through_id="a0")
    fold = messages_to_fold(history, window_start=12, summary=summary, after_turns=5)
    assert ids(fold) == ["h1", "c1", "a1", "h2", "c2", "a2"]
    # a summary that covers everything before the window leaves nothing to fold
    covered = Summary("…", version=4, through_id="a2")
    assert messages_to_fold(history, window_start=12, summary=covered, after_turns=5) == []


def test_a_summary_covering_past_the_window_start_folds_nothing_again() -> None:
    """The window can start earlier than last time (a smaller system prompt or fewer
    retrieved chunks this call): what the summary already covers must not be folded twice."""
    history = thread(6)
    summary = Summary("…", version=4, through_id="a3")  # covers turns 0-3
    assert messages_to_fold(history, window_start=8, summary=summary, after_turns=5) == []


def test_an_unknown_through_id_folds_from_the_start() -> None:
    history = thread(6)
    summary = Summary("…", version=1, through_id="gone")
    fold = messages_to_fold(history, window_start=4, summary=summary, after_turns=5)
    assert ids(fold) == ["h0", "c0", "a0"]


# --- the extractive summarizer ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "first"),
    [
        ("Hello there! How are you?", "Hello there!"),
        ("Is it covered? I hope so.", "Is it covered?"),
        ("سلام. قرارداد من کی تمام می‌شود؟", "سلام."),
        ("قرارداد من کی تمام می‌شود؟ ممنون", "قرارداد من کی تمام می‌شود؟"),
        ("你好。我想续保。", "你好。"),
        ("请问费用是多少？谢谢", "请问费用是多少？"),
        ("真的吗！太好了", "真的吗！"),
        ("no sentence end at all", "no sentence end at all"),
        ("  spaced\n\nout   words. next", "spaced out words."),
    ],
)
def test_first_sentence_understands_fa_zh_en_sentence_ends(text: str, first: str) -> None:
    assert first_sentence(text, 160) == first


def test_first_sentence_is_cut_to_the_limit() -> None:
    head = first_sentence("word " * 100, 20)
    assert len(head) <= 20
    assert head.endswith("…")
    assert first_sentence("", 20) == ""


def conversation() -> list[BaseMessage]:
    return [
        HumanMessage("I want to renew my policy. It ends soon.", id="h1"),
        AIMessage("", tool_calls=[{"name": "lookup", "args": {}, "id": "c1"}], id="c1"),
        AIMessage("Your policy ends in May. Shall I renew it?", id="a1"),
        HumanMessage("بله لطفاً. ممنون", id="h2"),
        AIMessage("   ", id="a2"),
        HumanMessage("费用是多少？谢谢", id="h3"),
        AIMessage("一共三百元。", id="a3"),
    ]


def test_the_summary_has_one_line_per_message_with_text() -> None:
    text = ExtractiveSummarizer(CharacterCounter()).fold(None, conversation(), max_tokens=10_000)
    assert text.splitlines() == [
        SUMMARY_HEADING,
        "- User: I want to renew my policy.",
        "- Assistant: Your policy ends in May.",
        "- User: بله لطفاً.",
        "- User: 费用是多少？",
        "- Assistant: 一共三百元。",
    ]


def test_the_summary_stays_within_max_tokens_and_keeps_the_newest_lines() -> None:
    # head_lines=0: nothing is pinned, lines go strictly oldest first
    counter = CharacterCounter()
    summarizer = ExtractiveSummarizer(counter, head_lines=0)
    full = summarizer.fold(None, conversation(), max_tokens=10_000).splitlines()[1:]
    for max_tokens in range(counter.count_system("\n".join([SUMMARY_HEADING, *full])) + 2):
        text = summarizer.fold(None, conversation(), max_tokens=max_tokens)
        assert counter.count_system(text) <= max_tokens
        lines = text.splitlines()[1:]
        # the newest lines, in order, as many as fit (the next older one would not)
        assert lines == full[len(full) - len(lines) :]
        if len(lines) < len(full):
            one_more = full[len(full) - len(lines) - 1 :]
            assert counter.count_system("\n".join([SUMMARY_HEADING, *one_more])) > max_tokens


def test_the_summary_keeps_how_the_conversation_began_and_the_newest_lines() -> None:
    counter = CharacterCounter()
    summarizer = ExtractiveSummarizer(counter)  # head_lines=2 by default
    full = summarizer.fold(None, conversation(), max_tokens=10_000).splitlines()[1:]
    expected = [full[0], full[1], full[-1]]
    max_tokens = counter.count_system("\n".join([SUMMARY_HEADING, *expected]))
    assert summarizer.fold(None, conversation(), max_tokens=max_tokens).splitlines()[1:] == (
        expected
    )


@pytest.mark.parametrize("head_lines", [0, 1, 2])
def test_the_summary_is_never_empty_when_its_first_and_newest_lines_each_fit(
    head_lines: int,
) -> None:
    """Whichever lines are pinned, a summary with room for its first line alone and for its
    newest line alone holds at least one of them: an empty summary drops every earlier turn
    from the model's view."""
    counter = CharacterCounter()
    summarizer = ExtractiveSummarizer(counter, head_lines=head_lines)
    full = summarizer.fold(None, conversation(), max_tokens=10_000).splitlines()[1:]
    alone = [counter.count_system(f"{SUMMARY_HEADING}\n{line}") for line in (full[0], full[-1])]
    everything = counter.count_system("\n".join([SUMMARY_HEADING, *full]))
    for max_tokens in range(max(alone), everything + 1):
        text = summarizer.fold(None, conversation(), max_tokens=max_tokens)
        assert counter.count_system(text) <= max_tokens
        assert text, f"empty summary at max_tokens={max_tokens}; one line needs {max(alone)}"
        lines = text.splitlines()[1:]
        assert lines == sorted(lines, key=full.index)  # lines of the full summary, in order


def test_the_summary_is_exact_in_o200k_too() -> None:
    counter = TiktokenCounter("o200k_base")
    for max_tokens in (0, 10, 25, 40, 1000):
        text = ExtractiveSummarizer(counter).fold(None, conversation() * 3, max_tokens=max_tokens)
        assert counter.count_system(text) <= max_tokens


def test_a_previous_summary_is_extended_not_repeated() -> None:
    summarizer = ExtractiveSummarizer(CharacterCounter())
    first = summarizer.fold(None, conversation()[:3], max_tokens=10_000)
    second = summarizer.fold(first, conversation()[3:], max_tokens=10_000)
    assert second == summarizer.fold(None, conversation(), max_tokens=10_000)
    assert second.count(SUMMARY_HEADING) == 1


async def test_summarize_is_fold() -> None:
    summarizer = ExtractiveSummarizer(CharacterCounter())
    text = await summarizer.summarize(None, conversation(), max_tokens=500)
    assert text == summarizer.fold(None, conversation(), max_tokens=500)


# --- state -----------------------------------------------------------------------------------


def test_summary_state_round_trips() -> None:
    summary = Summary("خلاصه 摘要 summary", version=7, through_id="m42")
    state = summary.to_state()
    assert state == {"text": "خلاصه 摘要 summary", "version": 7, "through_id": "m42"}
    assert Summary.from_state(state) == summary
    assert Summary.from_state({"text": "t", "version": "2"}) == Summary("t", 2, None)


def test_no_state_is_no_summary() -> None:
    assert Summary.from_state(None) is None
    assert Summary.from_state({}) is None


class CountingCounter(CharacterCounter):
    """Counts how many texts it was asked to count."""

    def __init__(self) -> None:
        super().__init__()
        self.texts = 0

    def count_text(self, text: str) -> int:
        self.texts += 1
        return super().count_text(text)


def _greedy(lines: list[str], head_lines: int, fits: object) -> list[str]:
    """The selection as a walk line by line (the rule ``_select`` implements)."""
    assert callable(fits)
    head: list[str] = []
    for line in lines[:head_lines]:
        if not fits([*head, line]):
            break
        head.append(line)
    tail: list[str] = []
    for line in reversed(lines[head_lines:]):
        if not fits([*head, line, *tail]):
            break
        tail.insert(0, line)
    return [*head, *tail]


@pytest.mark.parametrize("limit", [40, 300, 1_000, 2_000])
def test_a_long_fold_counts_the_summary_a_logarithmic_number_of_times(limit: int) -> None:
    """Over the limit, the newest lines that fit are found by bisection — the same lines a
    walk line by line keeps, with a count per halving instead of one per line."""
    counter = CountingCounter()
    summarizer = ExtractiveSummarizer(counter)
    messages: list[BaseMessage] = [
        HumanMessage(f"Question number {i} about my policy and its cover?") for i in range(400)
    ]
    summary = summarizer.fold(None, messages, max_tokens=limit)
    assert counter.count_system(summary) <= limit
    assert counter.texts <= 2 + summarizer.head_lines + 12, counter.texts

    lines = [f"- User: Question number {i} about my policy and its cover?" for i in range(400)]
    plain = CharacterCounter()
    expected = _greedy(
        lines,
        summarizer.head_lines,
        lambda part: plain.count_system("\n".join([SUMMARY_HEADING, *part])) <= limit,
    )
    assert summary.splitlines()[1:] == expected
