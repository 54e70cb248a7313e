"""``Summarizer`` conformance (``domain.summary``): what the rolling summary's writer returns.

The ``summarize`` and ``compact`` hooks call ``summarize(previous, messages, max_tokens=…)``
with the human and AI messages that fell out of the window (``messages_to_fold``: never a
tool result) and send the result ahead of the window as one system message. So whatever
writes it — the offline extractive summarizer, a chat model — must:

- stay within ``max_tokens`` by exact count (``counter.count_system``), for every limit from
  the heading alone upwards, and also when the previous summary is longer than the limit;
- open with ``SUMMARY_HEADING`` on its own first line (the next fold reads the previous
  summary's body below it);
- with room, keep what the folded messages said (in the user's script: fa / zh / en) and fold
  in what the previous summary said;
- leave the tool steps out: neither an AI message's tool-calling text nor its arguments;
- with nothing to fold (no message, or only messages without text), return the previous
  summary as it is (``""`` when there is none);
- never change the messages it reads.

Content checks need a faithful writer: a model summarizer is run with a model that reports
what it was asked (its prompt's lines), as a real one would summarize it.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from threadkeeper.domain.summary import SUMMARY_HEADING, Summarizer
from threadkeeper.domain.tokens import TokenCounter

ROOM = 100_000
"""A limit no summary here reaches."""

#: (marker, message): each marker is a word in the message's first sentence.
FIRST: list[tuple[str, BaseMessage]] = [
    ("Sara", HumanMessage("My name is Sara and I renew in May. More later.", id="s-h1")),
    ("dental", AIMessage("Your dental cover pays 80% of fillings. Ask me more.", id="s-a1")),
    ("تمدید", HumanMessage("می‌خواهم بیمه را تمدید کنم؟ ممنون.", id="s-h2")),
    ("续保", AIMessage("您可以在五月续保。谢谢！", id="s-a2")),
]
SECOND: list[tuple[str, BaseMessage]] = [
    ("Tehran", HumanMessage("We moved to Tehran last year. Is travel covered?", id="s-h3")),
    ("travel", AIMessage("Yes, travel cover applies abroad. Anything else?", id="s-a3")),
]
TOOL_TEXT = "Searching the PolicyVaultZ index now"
TOOL_ARGUMENT = "argument-secret-QX7"


def first() -> list[BaseMessage]:
    return [m for _, m in FIRST]


def second() -> list[BaseMessage]:
    return [m for _, m in SECOND]


def with_tool_step() -> list[BaseMessage]:
    """A human question, an AI message calling a tool (with text), and the answer (the tool's
    result is not folded: ``messages_to_fold`` passes human and AI messages only)."""
    call = {"name": "fetch_faq_document", "args": {"doc_id": TOOL_ARGUMENT}, "id": "s-c1"}
    return [
        HumanMessage("Is dental covered abroad? Thanks.", id="s-h4"),
        AIMessage(TOOL_TEXT, tool_calls=[call], id="s-a4-call"),
        AIMessage("Dental is covered abroad up to 500 euros.", id="s-a4"),
    ]


def snapshot(messages: Sequence[BaseMessage]) -> list[tuple[object, ...]]:
    return [(m.id, type(m).__name__, m.content, getattr(m, "tool_calls", None)) for m in messages]


def floor(counter: TokenCounter) -> int:
    """The smallest limit a summary is asked to fit: the heading alone."""
    return counter.count_system(SUMMARY_HEADING)


def limits(counter: TokenCounter, steps: int = 24) -> list[int]:
    """Limits from the heading alone to past what every message here costs."""
    low = floor(counter)
    high = low + sum(counter.count(m) for m in [*first(), *second(), *with_tool_step()]) + 40
    return sorted({low + (high - low) * i // steps for i in range(steps + 1)})


class SummarizerConformance:
    """Subclass and provide ``summarizer`` (a fixture returning the ``Summarizer``) and
    ``counter`` (the ``TokenCounter`` it budgets with)."""

    async def test_the_summary_fits_its_limit(
        self, summarizer: Summarizer, counter: TokenCounter
    ) -> None:
        for limit in limits(counter):
            for previous in (None, await summarizer.summarize(None, first(), max_tokens=ROOM)):
                text = await summarizer.summarize(previous, second(), max_tokens=limit)
                assert counter.count_system(text) <= limit, (
                    f"{counter.count_system(text)} tokens for a limit of {limit}: {text!r}"
                )

    async def test_a_previous_summary_over_the_limit_is_brought_within_it(
        self, summarizer: Summarizer, counter: TokenCounter
    ) -> None:
        """The limit may have been lowered since the previous summary was written."""
        previous = await summarizer.summarize(None, [*first(), *with_tool_step()], max_tokens=ROOM)
        limit = floor(counter) + max(1, (counter.count_system(previous) - floor(counter)) // 3)
        assert counter.count_system(previous) > limit
        text = await summarizer.summarize(previous, second(), max_tokens=limit)
        assert counter.count_system(text) <= limit

    async def test_the_summary_opens_with_the_heading(
        self, summarizer: Summarizer, counter: TokenCounter
    ) -> None:
        for limit in [ROOM, *limits(counter, steps=6)]:
            text = await summarizer.summarize(None, first(), max_tokens=limit)
            if text:
                assert text.splitlines()[0] == SUMMARY_HEADING, text
        text = await summarizer.summarize(None, first(), max_tokens=ROOM)
        assert text.startswith(SUMMARY_HEADING + "\n"), "with room, the summary has a body"

    async def test_with_room_what_the_messages_said_is_kept(
        self, summarizer: Summarizer, counter: TokenCounter
    ) -> None:
        text = await summarizer.summarize(None, first(), max_tokens=ROOM)
        missing = [marker for marker, _ in FIRST if marker not in text]
        assert missing == [], f"{missing} not in {text!r}"

    async def test_the_previous_summary_is_folded_in(
        self, summarizer: Summarizer, counter: TokenCounter
    ) -> None:
        previous = await summarizer.summarize(None, first(), max_tokens=ROOM)
        text = await summarizer.summarize(previous, second(), max_tokens=ROOM)
        missing = [marker for marker, _ in [*FIRST, *SECOND] if marker not in text]
        assert missing == [], f"{missing} not in {text!r}"
        assert text.splitlines()[0] == SUMMARY_HEADING
        assert text.count(SUMMARY_HEADING) == 1, "the previous heading is not repeated"

    async def test_tool_steps_are_left_out(
        self, summarizer: Summarizer, counter: TokenCounter
    ) -> None:
        text = await summarizer.summarize(None, with_tool_step(), max_tokens=ROOM)
        assert "500 euros" in text
        assert TOOL_TEXT not in text
        assert TOOL_ARGUMENT not in text

    async def test_nothing_to_fold_returns_the_previous_summary(
        self, summarizer: Summarizer, counter: TokenCounter
    ) -> None:
        previous = await summarizer.summarize(None, first(), max_tokens=ROOM)
        assert await summarizer.summarize(previous, [], max_tokens=ROOM) == previous
        assert await summarizer.summarize(None, [], max_tokens=ROOM) == ""
        empty: list[BaseMessage] = [AIMessage("", id="s-empty"), HumanMessage("  ", id="s-sp")]
        assert await summarizer.summarize(previous, empty, max_tokens=ROOM) == previous
        assert await summarizer.summarize(None, empty, max_tokens=ROOM) == ""

    async def test_the_messages_are_not_changed(
        self, summarizer: Summarizer, counter: TokenCounter
    ) -> None:
        messages = [*first(), *with_tool_step()]
        before = snapshot(messages)
        await summarizer.summarize(None, messages, max_tokens=ROOM)
        await summarizer.summarize(None, messages, max_tokens=floor(counter))
        assert snapshot(messages) == before

    @pytest.mark.parametrize("limit_offset", [0, 1, 7])
    async def test_the_tightest_limits_are_kept_too(
        self, summarizer: Summarizer, counter: TokenCounter, limit_offset: int
    ) -> None:
        limit = floor(counter) + limit_offset
        previous = await summarizer.summarize(None, first(), max_tokens=ROOM)
        for before in (None, previous):
            text = await summarizer.summarize(before, second(), max_tokens=limit)
            assert counter.count_system(text) <= limit
            assert not text or text.splitlines()[0] == SUMMARY_HEADING
