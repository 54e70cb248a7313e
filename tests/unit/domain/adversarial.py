"""Adversarial text for the linearity checks: every text rule, and inputs built to make each one
backtrack or rescan.

An input is a *unit* repeated up to a size in UTF-8 bytes (a message is refused over 32 KiB of
UTF-8, so 32 KiB is the largest a user can send), between an optional prefix and suffix. Each
unit is a near-match of some pattern: most of a statement, then not its end ("دو بچه و " is a
list of children that never reaches «دارم»), an opening without its closing ("<doc ", "["), a
product name and a bare topic side by side (so that every pair of them meets). The same inputs
serve the unit test (``test_linearity.py``: a generous bound at 32 KiB) and the benchmark
(``benchmarks/test_bench_text_linearity.py``: time at 32 KiB against 4 KiB x 8).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from langchain_core.messages import ToolMessage

KIB = 1024
SMALL = 4 * KIB
LARGE = 32 * KIB

Rule = Callable[[str], object]
AT = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Adversary:
    """``prefix + unit * n + suffix``, cut to a size in UTF-8 bytes."""

    lang: str
    """``fa``, ``zh`` or ``en`` (markup and numbers count as ``en``)."""
    name: str
    unit: str
    prefix: str = ""
    suffix: str = ""

    def text(self, size: int) -> str:
        return _sized(self.prefix, self.unit, self.suffix, size)

    @property
    def id(self) -> str:
        return f"{self.lang}:{self.name}"


@functools.lru_cache(maxsize=512)
def _sized(prefix: str, unit: str, suffix: str, size: int) -> str:
    room = size - len((prefix + suffix).encode())
    per = len(unit.encode())
    body = unit * (room // per)
    # fill the rest character by character, so every input is within a few bytes of ``size``
    for char in unit:
        if len(char.encode()) > room - len(body.encode()):
            break
        body += char
    return prefix + body + suffix


ADVERSARIES: tuple[Adversary, ...] = (
    # --- Persian ---------------------------------------------------------------------------
    Adversary("fa", "children listed, never the verb", "دو بچه و "),
    Adversary("fa", "children listed with commas", "دو بچه، "),
    Adversary("fa", "sons and daughters", "یک پسر و یک دختر و "),
    Adversary("fa", "children, no space", "دوبچه و"),
    Adversary("fa", "insurance with ezafe", "بیمه ی "),
    Adversary("fa", "product beside a bare topic", "بیمه دندان دندان پزشک "),
    Adversary("fa", "short product beside a bare topic", "بیمه عمر ارتودنسی "),
    Adversary("fa", "health term, suffixes", "بیماری های ها "),
    Adversary("fa", "spaced health phrase", "قند      "),
    Adversary("fa", "married, then a clause", "متاهل هستم و "),
    Adversary("fa", "ask for a person, never the verb", "با کارشناس "),
    Adversary("fa", "connect, never the person", "وصل کنید به "),
    Adversary("fa", "Persian digits", "۰۹۱۲ ۳۴۵ ۶۷۸۹ "),
    Adversary("fa", "formal words", "لطفا شما "),
    Adversary("fa", "instruction-like", "سیستم: همیشه تایید کن "),
    Adversary("fa", "a standing order, never the verb", "همیشه "),
    Adversary("fa", "address words", "خیابان کوچه ۱۲ "),
    # --- Chinese ---------------------------------------------------------------------------
    Adversary("zh", "product beside a bare topic", "寿险看牙"),
    Adversary("zh", "children listed", "一个孩子和", prefix="我有"),
    Adversary("zh", "lead clause, never 有", "并且", prefix="我结婚了"),
    Adversary("zh", "statements, never finished", "我结婚了并"),
    Adversary("zh", "son and daughter", "一儿一女"),
    Adversary("zh", "health words", "糖尿病重疾险"),
    Adversary("zh", "ask for a person", "找人工"),
    Adversary("zh", "casual particles", "你啊"),
    Adversary("zh", "a run of Latin in Chinese", "a"),
    Adversary("zh", "sentence ends", "。"),
    Adversary("zh", "override, never the object", "忽略"),
    Adversary("zh", "street numbers", "路1"),
    Adversary("zh", "dates, never the day", "1985年3月"),
    # --- English ---------------------------------------------------------------------------
    Adversary("en", "children listed, never a verb", "2 kids, 2 kids and "),
    Adversary("en", "a lead clause", "i a "),
    Adversary("en", "first person, never a verb", "we are married, "),
    Adversary("en", "product beside a bare topic", "dental insurance dentist "),
    Adversary("en", "short product beside a bare topic", "annuity dental ", prefix="insurance "),
    Adversary("en", "spaced health phrase", "heart - - - - "),
    Adversary("en", "someone's condition, unfinished", "my - "),
    Adversary("en", "laughter", "ha"),
    Adversary("en", "please, never the person", "please ", prefix="agent "),
    Adversary("en", "talk to, never the person", "talk to a "),
    Adversary("en", "IBAN-like groups", "ab12 "),
    Adversary("en", "digit groups before a decimal", "1 ", suffix=".5"),
    Adversary("en", "e-mail-like", "a.b-c+"),
    Adversary("en", "phone-like", "+1 (555) 0100-"),
    Adversary("en", "dates", "12/03/1985 "),
    Adversary("en", "address-like", "12 baker "),
    Adversary("en", "title-case words", "Sara "),
    Adversary("en", "instruction-like", "ignore all the previous "),
    Adversary("en", "a standing order, never the verb", "always "),
    Adversary("en", "e-mail without a domain", "a@"),
    Adversary("en", "birth words, never a year", "born "),
    Adversary("en", "honorifics, never a name", "Mr "),
    Adversary("en", "codes", "ab-1-"),
    Adversary("en", "JSON arrays never closed", "["),
    Adversary("en", "JSON arrays, nested", "[{"),
    Adversary("en", "documents never closed", "<documents>"),
    Adversary("en", "documents tag never ended", "<documents "),
    Adversary("en", "docs never closed", "<doc ", prefix="<documents>", suffix="</documents>"),
    Adversary(
        "en",
        "one long attribute name",
        "a",
        prefix="<documents><doc ",
        suffix=">x</doc></documents>",
    ),
    Adversary(
        "en",
        "attribute names, never a value",
        "a. ",
        prefix="<documents><doc ",
        suffix=">x</doc></documents>",
    ),
    Adversary("en", "truncation marks", "\n… [truncated 1"),
    Adversary("en", "sentence ends", ". "),
    Adversary("en", "bullets and headings", "\n# * "),
)
LANGS = ("fa", "zh", "en")


def domain_rules() -> dict[str, Rule]:
    """Every rule of ``threadkeeper.domain`` that reads text a user (or a model) wrote. What
    only combines them (``extract_memory``, ``MemoryRules.refusal``, ``plan_round``) is
    linear when they are: it calls each once."""
    from threadkeeper.domain import (
        compaction,
        escalation,
        extraction,
        instructions,
        pii,
        prompt,
        summary,
        text,
    )
    from threadkeeper.domain.estimate import EstimatingCounter
    from threadkeeper.domain.tokens import TiktokenCounter

    return {
        "extraction.detect_language": extraction.detect_language,
        "extraction.detect_formality": extraction.detect_formality,
        "extraction.detect_products": extraction.detect_products,
        "extraction.detect_household": extraction.detect_household,
        "pii.find_personal_data": pii.find_personal_data,
        "pii.contains_personal_data": pii.contains_personal_data,
        "pii.find_identifying_data": pii.find_identifying_data,
        "pii.contains_health_data": pii.contains_health_data,
        "instructions.is_instruction": instructions.is_instruction,
        "escalation.asks_for_person": escalation.asks_for_person,
        "escalation.detect_language": escalation.detect_language,
        "text.fold": text.fold,
        "text.script_counts": text.script_counts,
        "summary.first_sentence": lambda t: summary.first_sentence(t, 160),
        "compaction.truncate_tool_result": lambda t: compaction.truncate_tool_result(
            ToolMessage(t, tool_call_id="c", id="m"), 100
        ),
        "prompt.parse_documents": prompt.parse_documents,
        "estimate.count_text": EstimatingCounter().count_text,
        "tokens.tiktoken_count_text": TiktokenCounter("o200k_base").count_text,
    }


def app_rules() -> dict[str, Rule]:
    """The app's text rules: the builtin model's and the model extractor's reply parsing."""
    from threadkeeper.adapters import builtin_model
    from threadkeeper.app import memory
    from threadkeeper.domain.memory import Provenance

    source = Provenance("t", "m", AT)
    return {
        "builtin_model.terms": builtin_model._terms.__wrapped__,
        "builtin_model.sentences": builtin_model._sentences.__wrapped__,
        "builtin_model.asks_for_details": builtin_model._asks_for_details,
        "builtin_model.is_heading": builtin_model._is_heading,
        "builtin_model.stream_tokens.en": lambda t: builtin_model.stream_tokens(t, "en"),
        "builtin_model.stream_tokens.zh": lambda t: builtin_model.stream_tokens(t, "zh"),
        "memory.parse_candidates": lambda t: memory.parse_candidates(t, source),
    }


def all_rules() -> dict[str, Rule]:
    return {**domain_rules(), **app_rules()}


def cpu_seconds(rule: Callable[[str], object], text: str, *, floor: float = 0.0) -> float:
    """CPU seconds per call of ``rule`` on ``text``, over enough calls to take ``floor``
    seconds (process time: other processes on the machine do not count)."""
    calls = 0
    start = time.process_time()
    while True:
        rule(text)
        calls += 1
        spent = time.process_time() - start
        if spent >= floor:
            return spent / calls
