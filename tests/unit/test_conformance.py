"""The app's and the hooks' implementations of the domain ports pass the same conformance
suites as the domain's own (``tests/unit/domain/test_rules_conformance.py``): the counters,
the hooks' history policy and compactor, the model summarizer, and both memory extractors.

``THREADKEEPER_TOKENIZER`` may name a Hugging Face ``tokenizer.json``; the app reads it from
disk and builds nothing itself. The tests train a small byte-level BPE offline (a fraction of a
second, no download) with a post-processor that adds special tokens, which a counter must not
count: the model is sent the text, not a framed sequence.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from tests.support.scripted_model import ScriptedChatModel
from threadkeeper.app.counters import TokenizerJsonCounter, counter_from_name
from threadkeeper.app.memory import MemoryExtractor, ModelExtractor, RuleExtractor
from threadkeeper.conformance.compactor import CompactorConformance
from threadkeeper.conformance.history_policy import SUMMARY, SYSTEM, TEXTS, HistoryPolicyConformance
from threadkeeper.conformance.memory_extractor import AT, MemoryExtractorConformance
from threadkeeper.conformance.summarizer import SummarizerConformance
from threadkeeper.conformance.token_counter import (
    SAMPLES,
    CounterFactory,
    Reference,
    TokenCounterConformance,
)
from threadkeeper.domain.compaction import Compactor
from threadkeeper.domain.estimate import EstimatingCounter
from threadkeeper.domain.extraction import RoundText, extract_memory
from threadkeeper.domain.history import HistoryPolicy
from threadkeeper.domain.summary import Summarizer
from threadkeeper.domain.tokens import CharacterCounter, TiktokenCounter, TokenCounter, message_text
from threadkeeper.hooks import CompactMiddleware, HookSettings, ModelSummarizer


@pytest.fixture(scope="session")
def tokenizer_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE ``tokenizer.json`` trained on fa / zh / en text, saved to disk."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [*SAMPLES.values(), *TEXTS, SYSTEM, SUMMARY] * 20
    tokenizer.train_from_iterator(corpus, trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        special_tokens=[
            ("<s>", tokenizer.token_to_id("<s>")),
            ("</s>", tokenizer.token_to_id("</s>")),
        ],
    )
    path = tmp_path_factory.mktemp("tokenizer") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_the_trained_tokenizer_adds_special_tokens_a_counter_must_skip(
    tokenizer_json: Path,
) -> None:
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    text = SAMPLES["fa"]
    framed = len(tokenizer.encode(text).ids)
    assert framed == len(tokenizer.encode(text, add_special_tokens=False).ids) + 2
    assert counter_from_name(str(tokenizer_json)).count_text(text) == framed - 2


class TestTokenizerJsonCounter(TokenCounterConformance):
    @pytest.fixture
    def counter_factory(self, tokenizer_json: Path) -> CounterFactory:
        def build() -> TokenCounter:
            counter = counter_from_name(str(tokenizer_json))  # as THREADKEEPER_TOKENIZER does
            assert isinstance(counter, TokenizerJsonCounter)
            return counter

        return build

    @pytest.fixture
    def reference(self, tokenizer_json: Path) -> Reference:
        tokenizer = Tokenizer.from_file(str(tokenizer_json))
        return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


@pytest.fixture(params=["o200k_base", "tokenizer.json"])
def hook_settings(request: pytest.FixtureRequest, tokenizer_json: Path) -> HookSettings:
    """The settings the hooks are built from, with the default counter or a tokenizer.json."""
    counter = (
        TiktokenCounter("o200k_base")
        if request.param == "o200k_base"
        else counter_from_name(str(tokenizer_json))
    )
    return HookSettings(counter=counter, tool_result_max_chars=300)


class TestTheHooksHistoryPolicy(HistoryPolicyConformance):
    @pytest.fixture
    def policy(self, hook_settings: HookSettings) -> HistoryPolicy:
        return hook_settings.policy


class TestTheCompactHooksCompactor(CompactorConformance):
    @pytest.fixture
    def counter(self, hook_settings: HookSettings) -> TokenCounter:
        return hook_settings.counter

    @pytest.fixture
    def max_tool_chars(self, hook_settings: HookSettings) -> int:
        return hook_settings.tool_result_max_chars

    @pytest.fixture
    def compactor(self, hook_settings: HookSettings) -> Compactor:
        return CompactMiddleware(hook_settings).compactor


# --- Summarizer: a chat model writes the summary ----------------------------------------------


class ReportingModel(ScriptedChatModel):
    """A faithful summary writer: it answers with the lines it was asked to summarize (the
    previous summary and the new messages), as a real model would summarize them;
    ``padding`` more words after them, as a verbose one would."""

    padding: int = 0

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        asked = message_text(messages[-1])
        self.script.append(AIMessage(asked + " and so on" * self.padding))
        return super()._generate(messages, *args, **kwargs)


MODEL_COUNTERS = {
    "characters": CharacterCounter,
    "o200k_base": lambda: TiktokenCounter("o200k_base"),
    "estimate": EstimatingCounter,
}


class TestModelSummarizer(SummarizerConformance):
    @pytest.fixture(params=sorted(MODEL_COUNTERS))
    def counter(self, request: pytest.FixtureRequest) -> TokenCounter:
        return MODEL_COUNTERS[request.param]()

    @pytest.fixture(params=[0, 200], ids=["concise", "verbose"])
    def summarizer(self, request: pytest.FixtureRequest, counter: TokenCounter) -> Summarizer:
        return ModelSummarizer(ReportingModel(padding=request.param), counter)


# --- MemoryExtractor ----------------------------------------------------------------------------


class TestRuleExtractor(MemoryExtractorConformance):
    @pytest.fixture
    def extractor(self) -> MemoryExtractor:
        return RuleExtractor()


_NUMBERS = re.compile(r"[A-Z]{2}\d{2}[A-Z0-9]{10,30}|\d[\d ]{8,}\d")
_HEALTH = ("diabetes", "糖尿病")


class ProposingModel(ScriptedChatModel):
    """A careless extraction model: it proposes what the rules would extract from the text it
    is sent — and every number and health condition it sees in it (which the memory rules
    must refuse)."""

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        text = message_text(messages[-1])
        rows = [
            {"kind": item.kind.value, "key": item.key, "value": item.value}
            for item in extract_memory(RoundText("t", "m", text, "", AT))
        ]
        for n, found in enumerate(_NUMBERS.finditer(text)):
            rows.append({"kind": "profile", "key": f"number-{n}", "value": found.group()})
        for word in _HEALTH:
            if word in text:
                rows.append({"kind": "facts", "key": "condition", "value": f"has {word}"})
        self.script.append(AIMessage("Here you are: " + json.dumps(rows, ensure_ascii=False)))
        return super()._generate(messages, *args, **kwargs)


class TestModelExtractor(MemoryExtractorConformance):
    @pytest.fixture
    def extractor(self) -> MemoryExtractor:
        return ModelExtractor(ProposingModel())
