"""``TokenCounter`` conformance: what a message costs (framing, text, tool calls and invalid
tool calls), and a cache that never lets one message borrow another's count.

Every expected value is built from the counter's own ``count_text`` on the plain strings, so
the suite holds for exact counters and estimators alike; a subclass whose counter is exact
also provides ``reference`` (an independent count of a text) and is checked against it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)

from threadkeeper.domain.tokens import (
    MESSAGE_FRAMING,
    TOOL_CALL_FRAMING,
    TokenCounter,
    message_text,
    tool_call_text,
)

CounterFactory = Callable[[], TokenCounter]
"""Returns a new counter (its own, empty cache) on every call."""

Reference = Callable[[str], int]
"""An independent exact count of a plain text (the tokenizer itself, not the counter)."""

SAMPLES = {
    "en": "How do I renew my health insurance policy before it expires?",
    "fa": "سلام، می‌خواهم قرارداد بیمه درمان تکمیلی‌ام را تمدید کنم. هزینه‌اش چقدر است؟",
    "zh": "你好，我想续保我的医疗保险，请问费用是多少？",
    "mixed": "Claim #۱۲۳۴ — 理赔状态 pending; لطفاً check 2024-05-01.",
    "digits": "٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴۵۶۷۸۹ ０１２３ 0123456789",
    "emoji": "emoji 👩‍👩‍👧‍👦 🇮🇷 🇨🇳 done",
    "special": "<|endoftext|> is ordinary text here",
    "space": " ",
    "newlines": "\n\n\n",
    "zwnj": "می\u200cخواهم",
}

ARGS = {"query": "بیمه درمان 理赔 claim", "limit": 5, "locale": "fa-IR"}


def _call(call_id: str, name: str = "search_policies", **args: Any) -> dict[str, Any]:
    return {"name": name, "args": {**ARGS, **args}, "id": call_id, "type": "tool_call"}


def _invalid(name: str | None, args: str | None, call_id: str = "bad-1") -> dict[str, Any]:
    return {
        "name": name,
        "args": args,
        "id": call_id,
        "error": "arguments are not JSON",
        "type": "invalid_tool_call",
    }


def expected_cost(counter: TokenCounter, message: BaseMessage) -> int:
    """What ``message`` must cost, from ``count_text`` alone (no cache involved)."""
    tokens = MESSAGE_FRAMING + counter.count_text(message_text(message))
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            tokens += TOOL_CALL_FRAMING + counter.count_text(
                call["name"] + json.dumps(call["args"], ensure_ascii=False, sort_keys=True)
            )
        for bad in message.invalid_tool_calls:
            tokens += TOOL_CALL_FRAMING + counter.count_text(
                (bad.get("name") or "") + (bad.get("args") or "")
            )
    return tokens


class TokenCounterConformance:
    """Subclass and provide ``counter_factory`` (a fixture returning a ``CounterFactory``);
    override ``reference`` when the counter is exact."""

    @pytest.fixture
    def counter(self, counter_factory: CounterFactory) -> TokenCounter:
        return counter_factory()

    @pytest.fixture
    def reference(self) -> Reference | None:
        return None

    # --- texts -------------------------------------------------------------------------------

    def test_it_has_a_configuration_name(self, counter: TokenCounter) -> None:
        assert isinstance(counter.name, str)
        assert counter.name.strip()

    def test_empty_text_costs_nothing(self, counter: TokenCounter) -> None:
        assert counter.count_text("") == 0
        assert counter.count_system("") == 0

    @pytest.mark.parametrize("sample", sorted(SAMPLES))
    def test_any_text_costs_at_least_one_token(self, counter: TokenCounter, sample: str) -> None:
        assert counter.count_text(SAMPLES[sample]) >= 1

    @pytest.mark.parametrize("sample", ["en", "fa", "zh", "mixed", "emoji"])
    def test_more_text_costs_more(self, counter: TokenCounter, sample: str) -> None:
        text = SAMPLES[sample]
        once, many = counter.count_text(text), counter.count_text(f"{text} " * 20)
        assert many > once
        assert many >= 5 * once  # twenty copies never cost as little as five

    def test_counts_match_the_reference(
        self, counter: TokenCounter, reference: Reference | None
    ) -> None:
        if reference is None:
            pytest.skip("an estimating counter: accuracy is measured by its own tests")
        texts = [*SAMPLES.values(), "a" * 3000, "的" * 777, "tabs\tand\r\nwindows newlines"]
        texts.append(" ".join(SAMPLES.values()) * 5)
        mismatches = [t[:30] for t in texts if counter.count_text(t) != reference(t)]
        assert mismatches == []

    def test_a_system_text_costs_its_framing_and_text(self, counter: TokenCounter) -> None:
        for text in SAMPLES.values():
            assert counter.count_system(text) == MESSAGE_FRAMING + counter.count_text(text)

    # --- messages ----------------------------------------------------------------------------

    @pytest.mark.parametrize(
        "message",
        [
            HumanMessage(SAMPLES["fa"], id="h-fa"),
            AIMessage(SAMPLES["zh"], id="a-zh"),
            ToolMessage(SAMPLES["mixed"], tool_call_id="c1", id="t-mixed"),
            SystemMessage(SAMPLES["en"], id="s-en"),
        ],
        ids=["human", "ai", "tool", "system"],
    )
    def test_a_message_costs_its_framing_and_text(
        self, counter: TokenCounter, message: BaseMessage
    ) -> None:
        assert counter.count(message) == MESSAGE_FRAMING + counter.count_text(str(message.content))

    def test_content_blocks_are_counted_and_non_text_blocks_are_never_free(
        self, counter: TokenCounter
    ) -> None:
        text_only = HumanMessage([{"type": "text", "text": SAMPLES["en"]}], id="blocks-1")
        with_image = HumanMessage(
            [
                {"type": "text", "text": SAMPLES["en"]},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ],
            id="blocks-2",
        )
        assert counter.count(text_only) == MESSAGE_FRAMING + counter.count_text(SAMPLES["en"])
        assert counter.count(with_image) > counter.count(text_only)
        assert counter.count(with_image) == expected_cost(counter, with_image)

    def test_parallel_tool_calls_are_counted_with_their_arguments(
        self, counter: TokenCounter
    ) -> None:
        calls = [_call("c1"), _call("c2", name="get_claim_status", claim="۱۲۳۴")]
        message = AIMessage(SAMPLES["en"], tool_calls=calls, id="a-calls")
        expected = MESSAGE_FRAMING + counter.count_text(SAMPLES["en"])
        for call in calls:
            expected += TOOL_CALL_FRAMING + counter.count_text(
                tool_call_text(call["name"], call["args"])
            )
        assert counter.count(message) == expected == expected_cost(counter, message)
        plain = AIMessage(SAMPLES["en"], id="a-plain")
        assert counter.count(message) >= counter.count(plain) + 2 * (TOOL_CALL_FRAMING + 1)

    def test_longer_tool_arguments_cost_more(self, counter: TokenCounter) -> None:
        short = AIMessage("", tool_calls=[_call("c1")], id="a-short-args")
        long = AIMessage("", tool_calls=[_call("c1", query=SAMPLES["fa"] * 10)], id="a-long-args")
        assert counter.count(long) > counter.count(short)

    def test_invalid_tool_calls_are_counted(self, counter: TokenCounter) -> None:
        plain = AIMessage(SAMPLES["en"], id="a-no-calls")
        raw = '{"query": "بیمه درمان", "limit": '
        broken = AIMessage(SAMPLES["en"], invalid_tool_calls=[_invalid("faq", raw)], id="a-bad")
        assert counter.count(broken) == (
            counter.count(plain) + TOOL_CALL_FRAMING + counter.count_text("faq" + raw)
        )
        # a call with neither name nor arguments still costs its framing
        empty = AIMessage(SAMPLES["en"], invalid_tool_calls=[_invalid(None, None)], id="a-bad-0")
        assert counter.count(empty) == counter.count(plain) + TOOL_CALL_FRAMING
        # valid and invalid calls together: every one of them is counted
        both = AIMessage(
            SAMPLES["en"],
            tool_calls=[_call("c1")],
            invalid_tool_calls=[_invalid("faq", raw, "bad-2")],
            id="a-both",
        )
        assert counter.count(both) == expected_cost(counter, both)
        assert counter.count(both) > counter.count(broken)

    # --- the cache -------------------------------------------------------------------------

    def test_a_cached_count_is_the_count(self, counter_factory: CounterFactory) -> None:
        counter = counter_factory()
        messages = [HumanMessage(text, id=f"m-{name}") for name, text in SAMPLES.items()]
        first = [counter.count(m) for m in messages]
        assert [counter.count(m) for m in messages] == first
        assert first == [expected_cost(counter_factory(), m) for m in messages]

    def test_counts_do_not_depend_on_the_id(self, counter: TokenCounter) -> None:
        with_id = HumanMessage(SAMPLES["mixed"], id="x-1")
        other_id = HumanMessage(SAMPLES["mixed"], id="x-2")
        without = HumanMessage(SAMPLES["mixed"])
        assert counter.count(with_id) == counter.count(other_id) == counter.count(without)

    @pytest.mark.parametrize("long_first", [False, True])
    def test_a_reused_id_never_borrows_another_contents_count(
        self, counter_factory: CounterFactory, long_first: bool
    ) -> None:
        """Ids come from callers (any ``message_id``, the same id in another thread): two
        messages that share an id but not their content each get their own count."""
        counter, fresh = counter_factory(), counter_factory()
        short = HumanMessage(SAMPLES["en"], id="shared")
        long = HumanMessage(SAMPLES["en"] + " " + SAMPLES["fa"] * 20, id="shared")
        order = [long, short, long] if long_first else [short, long, short]
        counts = [counter.count(m) for m in order]
        assert counts == [expected_cost(fresh, m) for m in order]
        assert counter.count(long) > counter.count(short)

    def test_a_reused_id_with_other_tool_calls_is_counted_again(
        self, counter_factory: CounterFactory
    ) -> None:
        counter, fresh = counter_factory(), counter_factory()
        variants = [
            AIMessage("checking", tool_calls=[_call("c1")], id="shared-ai"),
            AIMessage("checking", tool_calls=[_call("c1", query="x" * 400)], id="shared-ai"),
            AIMessage("checking", tool_calls=[_call("c1"), _call("c2")], id="shared-ai"),
            AIMessage("checking", id="shared-ai"),
            AIMessage(
                "checking",
                invalid_tool_calls=[_invalid("faq", '{"doc_id": ' + '"d"' * 50)],
                id="shared-ai",
            ),
            AIMessage("checking", invalid_tool_calls=[_invalid("faq", "{")], id="shared-ai"),
        ]
        counts = [counter.count(m) for m in variants]
        assert counts == [expected_cost(fresh, m) for m in variants]
        assert len(set(counts)) == len(counts), "every variant costs something else"
        # and back again: the first variant still has its own count
        assert counter.count(variants[0]) == counts[0]

    def test_separate_counters_agree(self, counter_factory: CounterFactory) -> None:
        one, other = counter_factory(), counter_factory()
        messages: list[BaseMessage] = [
            HumanMessage(SAMPLES["zh"], id="d-1"),
            AIMessage(SAMPLES["fa"], tool_calls=[_call("c9")], id="d-2"),
            ToolMessage(SAMPLES["mixed"] * 3, tool_call_id="c9", id="d-3"),
        ]
        assert [one.count(m) for m in messages] == [other.count(m) for m in messages]

    def test_concurrent_counts_are_the_sequential_ones(
        self, counter_factory: CounterFactory
    ) -> None:
        counter = counter_factory()
        messages = [
            HumanMessage(f"{text} {n}", id=f"c-{n % 7}")  # ids shared by different contents
            for n, text in enumerate(list(SAMPLES.values()) * 6)
        ]
        with ThreadPoolExecutor(max_workers=8) as pool:
            concurrent = list(pool.map(counter.count, messages * 4))
        fresh = counter_factory()
        assert concurrent == [expected_cost(fresh, m) for m in messages * 4]
