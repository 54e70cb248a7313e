"""The domain's token counters, history policy, compactor, memory rules and extractive
summarizer pass the port conformance suites (the app's and the hooks' configurations:
``tests/unit/test_conformance.py``)."""

from __future__ import annotations

import bpe_openai  # type: ignore[import-untyped]
import pytest

from threadkeeper.conformance.compactor import CompactorConformance
from threadkeeper.conformance.history_policy import HistoryPolicyConformance
from threadkeeper.conformance.memory_rules import MemoryRulesConformance
from threadkeeper.conformance.summarizer import SummarizerConformance
from threadkeeper.conformance.token_counter import (
    CounterFactory,
    Reference,
    TokenCounterConformance,
)
from threadkeeper.domain.compaction import Compactor, WindowCompactor
from threadkeeper.domain.estimate import EstimatingCounter
from threadkeeper.domain.history import HistoryPolicy, TurnWindowPolicy
from threadkeeper.domain.memory import MemoryRules
from threadkeeper.domain.summary import ExtractiveSummarizer, Summarizer
from threadkeeper.domain.tokens import CharacterCounter, TiktokenCounter, TokenCounter

COUNTERS: dict[str, CounterFactory] = {
    "o200k_base": lambda: TiktokenCounter("o200k_base"),
    "characters": CharacterCounter,
    "estimate": EstimatingCounter,
}


# --- TokenCounter ------------------------------------------------------------------------------


class TestTiktokenO200k(TokenCounterConformance):
    @pytest.fixture
    def counter_factory(self) -> CounterFactory:
        return lambda: TiktokenCounter("o200k_base")

    @pytest.fixture
    def reference(self) -> Reference:
        independent = bpe_openai.get_encoding("o200k_base")  # not tiktoken: another codebase
        return lambda text: len(independent.encode_ordinary(text))


class TestTiktokenCl100k(TokenCounterConformance):
    @pytest.fixture
    def counter_factory(self) -> CounterFactory:
        return lambda: TiktokenCounter("cl100k_base")

    @pytest.fixture
    def reference(self) -> Reference:
        independent = bpe_openai.get_encoding("cl100k_base")
        return lambda text: len(independent.encode_ordinary(text))


class TestCharacterCounter(TokenCounterConformance):
    @pytest.fixture
    def counter_factory(self) -> CounterFactory:
        return CharacterCounter

    @pytest.fixture
    def reference(self) -> Reference:
        return len


class TestEstimatingCounter(TokenCounterConformance):
    @pytest.fixture
    def counter_factory(self) -> CounterFactory:
        return EstimatingCounter


# --- HistoryPolicy, with each counter ---------------------------------------------------------


@pytest.fixture(params=sorted(COUNTERS))
def counter(request: pytest.FixtureRequest) -> TokenCounter:
    return COUNTERS[request.param]()


class TestTurnWindowPolicy(HistoryPolicyConformance):
    @pytest.fixture
    def policy(self, counter: TokenCounter) -> HistoryPolicy:
        return TurnWindowPolicy(counter)


# --- Compactor --------------------------------------------------------------------------------


@pytest.fixture(params=[120, 400])
def max_tool_chars(request: pytest.FixtureRequest) -> int:
    return int(request.param)


class TestWindowCompactor(CompactorConformance):
    @pytest.fixture
    def compactor(self, counter: TokenCounter, max_tool_chars: int) -> Compactor:
        return WindowCompactor(TurnWindowPolicy(counter), max_tool_chars=max_tool_chars)


# --- MemoryRules ------------------------------------------------------------------------------


class TestMemoryRules(MemoryRulesConformance):
    @pytest.fixture(params=["default", "tight"])
    def rules(self, request: pytest.FixtureRequest) -> MemoryRules:
        if request.param == "default":
            return MemoryRules()
        return MemoryRules(max_facts=3, max_value_chars=80)


# --- Summarizer -------------------------------------------------------------------------------


class TestExtractiveSummarizer(SummarizerConformance):
    @pytest.fixture
    def summarizer(self, counter: TokenCounter) -> Summarizer:
        return ExtractiveSummarizer(counter)


class TestExtractiveSummarizerShortLines(SummarizerConformance):
    """Sentences cut short and a single head line: still within the contract."""

    @pytest.fixture
    def summarizer(self, counter: TokenCounter) -> Summarizer:
        return ExtractiveSummarizer(counter, sentence_chars=60, head_lines=1)
