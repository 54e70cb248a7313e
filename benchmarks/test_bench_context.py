"""Context accounting per model call against history length.

Baseline: what users would otherwise write — ``trim_messages(strategy="last",
start_on="human", include_system=True)`` with a tiktoken o200k counter over the whole list.
threadkeeper: ``TurnWindowPolicy`` with the id-cached exact counter; the cache is warm, as it
is from the second model call of a thread on (each message is counted once in its life).
"""

from __future__ import annotations

import pytest
from langchain_core.messages import BaseMessage, SystemMessage, trim_messages

from benchmarks.conftest import BenchSize, conversation
from threadkeeper.domain.history import TurnWindowPolicy, window_tokens
from threadkeeper.domain.tokens import TiktokenCounter, message_text

BUDGET = 8000
SYSTEM = "You are an insurance assistant. Answer from the documents; cite them."
COUNTER = TiktokenCounter("o200k_base")
_ENCODE = COUNTER._encode


def _tiktoken_counter(messages: list[BaseMessage]) -> int:
    return sum(3 + len(_ENCODE(message_text(m))) for m in messages) + 3


@pytest.fixture(params=["100", "1000", "400", "4000"])
def history(request: pytest.FixtureRequest, size: BenchSize) -> list[BaseMessage]:
    length = int(request.param)
    if length not in size.history_lengths:
        pytest.skip(f"{length} messages are not part of the {size.name} size")
    return conversation(length)


def test_trim_messages_tiktoken(benchmark, history: list[BaseMessage]) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"context accounting, {len(history)} messages"
    benchmark.extra_info.update(role="baseline", messages=len(history))
    full = [SystemMessage(SYSTEM), *history]
    window = benchmark(
        trim_messages,
        full,
        max_tokens=BUDGET,
        token_counter=_tiktoken_counter,
        strategy="last",
        start_on="human",
        include_system=True,
    )
    assert _tiktoken_counter(window) <= BUDGET


def test_threadkeeper_window(benchmark, history: list[BaseMessage]) -> None:  # type: ignore[no-untyped-def]
    benchmark.group = f"context accounting, {len(history)} messages"
    policy = TurnWindowPolicy(COUNTER)
    policy.window(history, budget=BUDGET, system=SYSTEM)  # warm the id cache
    window = benchmark(policy.window, history, budget=BUDGET, system=SYSTEM)
    benchmark.extra_info.update(
        role="threadkeeper",
        messages=len(history),
        window_messages=len(window.messages),
        window_tokens=window.tokens,
        gate_max_ratio=0.2,
    )
    assert window_tokens(window, COUNTER, SYSTEM) == window.tokens <= BUDGET
