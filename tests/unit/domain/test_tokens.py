"""Token accounting: exact o200k counts, what a message costs, the id cache, the vocabulary."""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import json
import random

import bpe_openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from tests.unit.domain.conversations import LANGUAGE_NAMES, spell_text
from threadkeeper.domain import tokens
from threadkeeper.domain.tokens import (
    MESSAGE_FRAMING,
    TOOL_CALL_FRAMING,
    CharacterCounter,
    IdentityMemo,
    TiktokenCounter,
    VocabularyError,
    derive_id,
    load_encoding,
    message_text,
    tool_call_text,
)

COUNTER = TiktokenCounter("o200k_base")
ENCODING = load_encoding("o200k_base")
INDEPENDENT = bpe_openai.get_encoding("o200k_base")

SAMPLES = {
    "en": "How do I renew my health insurance policy before it expires?",
    "fa": "سلام، می‌خواهم قرارداد بیمه درمان تکمیلی‌ام را تمدید کنم. هزینه‌اش چقدر است؟",
    "zh": "你好，我想续保我的医疗保险，请问费用是多少？",
    "mixed": "Claim #۱۲۳۴ — 理赔状态 pending; لطفاً check 2024-05-01.",
}


# --- exact counts --------------------------------------------------------------------------


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_counts_are_the_encodings_own(language: str) -> None:
    text = SAMPLES[language]
    assert COUNTER.count_text(text) == len(ENCODING.encode_ordinary(text))
    assert COUNTER.count_text(text) == len(INDEPENDENT.encode_ordinary(text))


def test_known_counts_pin_the_vocabulary() -> None:
    # Fixed values: a different vocabulary (cl100k, or a corrupted file) counts differently.
    assert COUNTER.count_text("hello world") == 2
    assert COUNTER.count_text("سلام دنیا") == len(INDEPENDENT.encode_ordinary("سلام دنیا"))
    cl100k = TiktokenCounter("cl100k_base")
    persian = SAMPLES["fa"]
    # o200k is much cheaper on Persian than cl100k (field notes: about 2.3x)
    assert cl100k.count_text(persian) > 1.5 * COUNTER.count_text(persian)


def test_exact_on_a_mixed_corpus_against_an_independent_tokenizer() -> None:
    rng = random.Random(20261129)
    corpus = [
        spell_text(rng.choice(LANGUAGE_NAMES), rng.randrange(2**20), rng.randrange(1, 3000))
        for _ in range(300)
    ]
    corpus += [
        "",
        " ",
        "\n\n\n",
        "   leading and trailing   ",
        "می\u200cخواهم",  # ZWNJ inside a Persian word
        "٠١٢٣٤٥٦٧٨٩ ۰۱۲۳۴۵۶۷۸۹ ０１２３",  # Arabic-Indic, Persian, full-width digits
        "emoji 👩‍👩‍👧‍👦 🇮🇷 🇨🇳 done",
        "<|endoftext|> is ordinary text here",
        "tabs\tand\r\nwindows newlines",
        "a" * 5000,
        "的" * 777,
    ]
    mismatches = [
        text[:40]
        for text in corpus
        if COUNTER.count_text(text) != len(INDEPENDENT.encode_ordinary(text))
    ]
    assert mismatches == []


def test_special_token_text_is_counted_as_ordinary_text() -> None:
    # A user typing "<|endoftext|>" must not be refused or counted as one special token.
    text = "<|endoftext|>"
    assert COUNTER.count_text(text) == len(INDEPENDENT.encode_ordinary(text)) > 1


def test_empty_text_costs_nothing() -> None:
    assert COUNTER.count_text("") == 0
    assert COUNTER.count_system("") == 0


# --- what a message costs --------------------------------------------------------------------


def test_a_message_costs_its_framing_and_text() -> None:
    counter = CharacterCounter()
    assert counter.count(HumanMessage("hello", id="h1")) == MESSAGE_FRAMING + 5
    assert counter.count(ToolMessage("42", tool_call_id="c1", id="t1")) == MESSAGE_FRAMING + 2
    assert counter.count(SystemMessage("be brief", id="s1")) == MESSAGE_FRAMING + 8
    assert counter.count_system("be brief") == MESSAGE_FRAMING + 8


def test_tool_call_names_and_arguments_are_counted() -> None:
    counter = CharacterCounter()
    args = {"query": "بیمه درمان", "limit": 5}
    call = {"name": "search_policies", "args": args, "id": "c1"}
    message = AIMessage("", tool_calls=[call, {**call, "id": "c2"}], id="a1")
    serialized = "search_policies" + json.dumps(args, ensure_ascii=False, sort_keys=True)
    assert tool_call_text("search_policies", args) == serialized
    expected = MESSAGE_FRAMING + 2 * (TOOL_CALL_FRAMING + len(serialized))
    assert counter.count(message) == expected
    # the arguments matter: longer arguments cost more
    longer = AIMessage(
        "",
        tool_calls=[{"name": "search_policies", "args": {**args, "query": "x" * 100}, "id": "c"}],
        id="a2",
    )
    shorter = AIMessage("", tool_calls=[call], id="a3")
    assert counter.count(longer) > counter.count(shorter)


def test_tool_calls_are_counted_exactly_in_o200k() -> None:
    args = {"query": "理赔 status", "locale": "zh-CN"}
    message = AIMessage(
        "checking", tool_calls=[{"name": "get_claim_status", "args": args, "id": "c1"}], id="a1"
    )
    serialized = "get_claim_status" + json.dumps(args, ensure_ascii=False, sort_keys=True)
    expected = (
        MESSAGE_FRAMING
        + len(INDEPENDENT.encode_ordinary("checking"))
        + TOOL_CALL_FRAMING
        + len(INDEPENDENT.encode_ordinary(serialized))
    )
    assert TiktokenCounter("o200k_base").count(message) == expected


def test_content_blocks_are_counted_and_non_text_blocks_are_never_free() -> None:
    blocks = [
        {"type": "text", "text": "see "},
        "plain ",
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
    ]
    message = HumanMessage(blocks, id="h1")
    text = message_text(message)
    assert text.startswith("see plain ")
    assert "image_url" in text
    assert CharacterCounter().count(message) == MESSAGE_FRAMING + len(text)


# --- the cache: by message id ----------------------------------------------------------------


class _Tally(CharacterCounter):
    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def count_text(self, text: str) -> int:
        self.texts.append(text)
        return super().count_text(text)


def test_counts_are_cached_by_id_and_content_so_a_reused_id_cannot_borrow_a_count() -> None:
    """Ids come from callers: the same id with longer content must be counted again, or a
    long message could slip past the budget (and the 413 check) on a short one's count."""
    counter = _Tally()
    assert counter.count(HumanMessage("short", id="m1")) == MESSAGE_FRAMING + 5
    assert counter.count(HumanMessage("short", id="m1")) == MESSAGE_FRAMING + 5
    assert counter.texts == ["short"]  # the second count came from the cache
    assert counter.count(HumanMessage("a much longer text", id="m1")) == MESSAGE_FRAMING + 18
    assert counter.count(HumanMessage("a much longer text", id="m2")) == MESSAGE_FRAMING + 18
    # tool calls are part of what is cached: other arguments under the same id are recounted
    call = {"name": "faq", "args": {"doc_id": "d1"}, "id": "c1"}
    longer = {"name": "faq", "args": {"doc_id": "d1" * 50}, "id": "c1"}
    first = counter.count(AIMessage("", id="a1", tool_calls=[call]))
    assert counter.count(AIMessage("", id="a1", tool_calls=[longer])) == first + 98


def test_invalid_tool_calls_are_counted() -> None:
    counter = CharacterCounter()
    plain = counter.count(AIMessage("x", id="a"))
    broken = AIMessage(
        "x",
        id="b",
        invalid_tool_calls=[
            {
                "name": "faq",
                "args": '{"doc_id": ',
                "id": "c",
                "error": "bad json",
                "type": "invalid_tool_call",
            }
        ],
    )
    assert counter.count(broken) == plain + TOOL_CALL_FRAMING + len('faq{"doc_id": ')


def test_messages_without_an_id_are_never_cached() -> None:
    counter = CharacterCounter()
    assert counter.count(HumanMessage("ab")) == MESSAGE_FRAMING + 2
    assert counter.count(HumanMessage("abcd")) == MESSAGE_FRAMING + 4


def test_the_same_message_object_is_counted_once_until_its_content_or_calls_change() -> None:
    """A late turn's windows pass over the whole history on every model call: the history's
    messages are the same objects run after run, so each is counted once (``IdentityMemo``),
    and counted again once its content or tool calls are other objects."""
    counter = _Tally()
    human = HumanMessage("short")  # no id: only the object itself can be remembered
    assert counter.count(human) == counter.count(human) == MESSAGE_FRAMING + 5
    assert counter.texts == ["short"]
    human.content = "a much longer text"
    assert counter.count(human) == MESSAGE_FRAMING + 18
    answer = AIMessage("", id="a1")
    plain = counter.count(answer)
    answer.tool_calls = [{"name": "faq", "args": {"doc_id": "d1"}, "id": "c1", "type": "tool_call"}]
    assert counter.count(answer) == plain + TOOL_CALL_FRAMING + len('faq{"doc_id": "d1"}')
    answer.invalid_tool_calls = [
        {"name": "faq", "args": "{", "id": "c2", "error": "bad", "type": "invalid_tool_call"}
    ]
    assert counter.count(answer) == plain + 2 * TOOL_CALL_FRAMING + len('faq{"doc_id": "d1"}faq{')
    # each change counted once: the text, then the text and every call again
    calls = 'faq{"doc_id": "d1"}'
    assert counter.texts == ["short", "a much longer text", "", "", calls, "", calls, "faq{"]


def test_the_identity_memo_is_bounded_and_holds_what_it_remembers() -> None:
    memo: IdentityMemo[int] = IdentityMemo(limit=2)
    messages = [HumanMessage(f"m{i}") for i in range(3)]
    for i, message in enumerate(messages):
        assert memo.put(message, i) == i
    assert len(memo) == 1  # emptied when full, then the newest kept
    assert memo.get(messages[2]) == 2
    assert memo.get(messages[0]) is None
    assert memo.get(HumanMessage("m2")) is None  # an equal message is another object


def test_derive_id_is_deterministic_and_new() -> None:
    assert derive_id("m1", "t2000") == derive_id("m1", "t2000")
    assert derive_id("m1", "t2000") != "m1"
    assert derive_id("m1", "t2000") != derive_id("m1", "t500")
    assert derive_id("m1", "t2000") != derive_id("m2", "t2000")
    assert derive_id(None, "t2000") == derive_id(None, "t2000")


# --- the vocabulary: packaged, checked, never downloaded -------------------------------------


def _packaged_vocabulary(name: str) -> bytes:
    resource = importlib.resources.files("bpe_openai") / "data" / f"{name}.tiktoken.gz"
    return gzip.decompress(resource.read_bytes())


def test_a_vocabulary_whose_hash_does_not_match_is_refused() -> None:
    with pytest.raises(VocabularyError, match="sha256"):
        tokens._packaged_ranks("o200k_base", "0" * 64)


def test_the_packaged_vocabulary_matches_tiktokens_published_hash(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, str]] = []

    def spy(encoding: str, expected_sha256: str) -> dict[bytes, int]:
        seen.append((encoding, expected_sha256))
        raise VocabularyError("stop here: the hash is what this test wants")

    monkeypatch.setattr(tokens, "_ENCODINGS", {})
    monkeypatch.setattr(tokens, "_packaged_ranks", spy)
    with pytest.raises(VocabularyError, match="stop here"):
        load_encoding("o200k_base")
    [(encoding, expected)] = seen
    assert encoding == "o200k_base"
    assert hashlib.sha256(_packaged_vocabulary("o200k_base")).hexdigest() == expected


def test_loading_refuses_a_tampered_vocabulary(monkeypatch: pytest.MonkeyPatch) -> None:
    class WrongDigest:
        def __init__(self, _data: bytes) -> None:
            pass

        def hexdigest(self) -> str:
            return "f" * 64

    monkeypatch.setattr(tokens, "_ENCODINGS", {})
    monkeypatch.setattr(tokens.hashlib, "sha256", WrongDigest)
    with pytest.raises(VocabularyError, match=r"sha256 f{64} != tiktoken's"):
        load_encoding("o200k_base")


def test_an_unknown_encoding_is_refused() -> None:
    with pytest.raises(VocabularyError):
        load_encoding("p50k_base")


def test_the_encoding_is_loaded_once() -> None:
    assert load_encoding("o200k_base") is ENCODING
