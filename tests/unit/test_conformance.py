"""The app's and the hooks' implementations of the domain ports pass the same conformance
suites as the domain's own (``tests/unit/domain/test_rules_conformance.py``).

``THREADKEEPER_TOKENIZER`` may name a Hugging Face ``tokenizer.json``; the app reads it from
disk and builds nothing itself. The tests train a small byte-level BPE offline (a fraction of a
second, no download) with a post-processor that adds special tokens, which a counter must not
count: the model is sent the text, not a framed sequence.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from tests.conformance.compactor import CompactorConformance
from tests.conformance.history_policy import SUMMARY, SYSTEM, TEXTS, HistoryPolicyConformance
from tests.conformance.token_counter import (
    SAMPLES,
    CounterFactory,
    Reference,
    TokenCounterConformance,
)
from threadkeeper.app.counters import TokenizerJsonCounter, counter_from_name
from threadkeeper.domain.compaction import Compactor
from threadkeeper.domain.history import HistoryPolicy
from threadkeeper.domain.tokens import TiktokenCounter, TokenCounter
from threadkeeper.hooks import CompactMiddleware, HookSettings


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
