"""Hypothesis strategies: mixed Persian/Chinese/English conversations, clean or corrupted.

A generated conversation is a list of turns; a turn is a human message followed by 0-4 steps,
a step being a plain AI answer or an AI message with 1-3 parallel tool calls followed by one
result per call (the results in random order among themselves). Message ids are unique within
a conversation and carry a digest of the content, so one id always means one content, even
across examples (token counters cache by id).

Corrupted histories add what real checkpoints sometimes hold: an orphaned tool result, an AI
tool call whose result is missing, an empty AI message, messages before the first human one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

FA_WORDS = (
    "سلام",
    "بیمه",
    "درمان",
    "قرارداد",
    "پرداخت",
    "خسارت",
    "لطفاً",
    "ممنونم",
    "حساب",
    "کاربری",
    "سؤال",
    "پاسخ",
    "تمدید",
    "مدارک",
    "بیمارستان",
    "هزینه",
    "امروز",
    "چطور",
    "می‌خواهم",
    "نمی‌دانم",
    "شماره",
    "پیگیری",
)
ZH_WORDS = (
    "你好",
    "保险",
    "理赔",
    "合同",
    "付款",
    "谢谢",
    "请问",
    "账户",
    "医院",
    "费用",
    "今天",
    "怎么",
    "续保",
    "材料",
    "问题",
    "回答",
    "我们",
    "已经",
    "申请",
    "处理",
)
EN_WORDS = (
    "hello",
    "insurance",
    "claim",
    "policy",
    "payment",
    "thanks",
    "please",
    "account",
    "hospital",
    "cost",
    "today",
    "how",
    "renew",
    "documents",
    "question",
    "answer",
    "the",
    "and",
    "of",
    "status",
    "premium",
)
SEPARATORS = (" ", " ", " ", ", ", ". ", "، ", "؟ ", "。", "，", "! ", "? ", "\n", " - ", ": ")
TOOL_NAMES = ("search_policies", "get_claim_status", "lookup_hospital", "convert_currency")

PERSIAN_DIGITS = str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹")
LANGUAGES = {
    "en": EN_WORDS,
    "fa": FA_WORDS,
    "mixed": FA_WORDS + ZH_WORDS + EN_WORDS,
    "zh": ZH_WORDS,
}
LANGUAGE_NAMES = tuple(LANGUAGES)
LOCALES = (None, "fa-IR", "zh-CN", "en")


@functools.lru_cache(maxsize=4096)
def spell_text(language: str, seed: int, length: int) -> str:
    """Words of ``language`` (with digits and punctuation) up to ``length`` characters."""
    rng = random.Random(seed)
    words = LANGUAGES[language]
    parts: list[str] = []
    size = 0
    while size < length:
        roll = rng.random()
        if roll < 0.1:
            word = str(rng.randrange(10**6))
            word = word.translate(PERSIAN_DIGITS) if language == "fa" and roll < 0.05 else word
        else:
            word = rng.choice(words)
        part = word + rng.choice(SEPARATORS)
        parts.append(part)
        size += len(part)
    text = "".join(parts)[:length]
    return text if text.strip() else "?"


def _spelled(min_chars: int, max_chars: int, seed: int) -> str:
    language = LANGUAGE_NAMES[seed % len(LANGUAGE_NAMES)]
    share = (seed >> 2) % 1024 / 1023  # lengths skewed short: quadratic in a uniform share
    length = min_chars + round((max_chars - min_chars) * share * share)
    return spell_text(language, seed >> 12, length)


def texts(*, min_chars: int = 1, max_chars: int = 300) -> st.SearchStrategy[str]:
    """Real-looking fa/zh/en text (one language or mixed); never blank; within the bounds.

    One integer draw per text, spelled out deterministically (language, length and words all
    follow from it); a shrunk example (seed 0) is the shortest text, still readable.
    """
    return st.integers(0, 2**32).map(functools.partial(_spelled, min_chars, max_chars))


# --- specs: the content of a conversation, before ids are assigned ---------------------------


@dataclass(frozen=True)
class CallSpec:
    name: str
    args: dict[str, Any]
    result: str


@dataclass(frozen=True)
class StepSpec:
    answer: str | None
    """A plain AI answer (``calls`` empty), or the AI's text beside its tool calls."""
    calls: tuple[CallSpec, ...] = ()
    order: tuple[int, ...] = ()
    """The order in which the results arrive."""


@dataclass(frozen=True)
class TurnSpec:
    human: str
    steps: tuple[StepSpec, ...]


#: Text lengths scale with a per-conversation ``scale`` in 0..SCALE_MAX (0: shortest texts).
SCALE_MAX = 8
#: A turn's shape: ``shape % 5`` steps, the kind of step i being base-4 digit i of
#: ``shape // 5`` (0: a plain answer, k: an AI message with k parallel tool calls).
SHAPES = 5 * 4**4


class _Spell:
    """Spells out one turn's texts from its seed, lengths scaled by the conversation's scale."""

    def __init__(self, seed: int, scale: int) -> None:
        self.rng = random.Random(seed)
        self.scale = scale / SCALE_MAX

    def text(self, max_chars: int, *, skew: int = 2) -> str:
        rng = self.rng
        length = 1 + round((max_chars - 1) * rng.random() ** skew * self.scale)
        return spell_text(rng.choice(LANGUAGE_NAMES), rng.randrange(2**20), length)


def turn_spec(shape: int, seed: int, scale: int) -> TurnSpec:
    """One turn: a human message, then 0-4 steps (plain answers or 1-3 parallel tool calls,
    each tool result up to ~2,000 characters, results arriving in random order)."""
    spell = _Spell(seed, scale)
    human = spell.text(300)
    kinds = [(shape // 5 // 4**i) % 4 for i in range(shape % 5)]
    steps: list[StepSpec] = []
    for kind in kinds:
        if kind == 0:
            steps.append(StepSpec(spell.text(400)))
            continue
        calls = []
        for _ in range(kind):
            args: dict[str, Any] = {"query": spell.text(60)}
            if spell.rng.random() < 0.5:
                args["limit"] = spell.rng.randrange(1, 50)
            locale = spell.rng.choice(LOCALES)
            if locale:
                args["locale"] = locale
            calls.append(CallSpec(spell.rng.choice(TOOL_NAMES), args, spell.text(2000, skew=3)))
        order = list(range(kind))
        spell.rng.shuffle(order)
        answer = spell.rng.choice((None, "", spell.text(80)))
        steps.append(StepSpec(answer, tuple(calls), tuple(order)))
    return TurnSpec(human, tuple(steps))


_shapes = st.integers(0, SHAPES - 1)
_seeds = st.integers(0, 2**32)


# --- materialized conversations --------------------------------------------------------------


def _digest(*parts: object) -> str:
    raw = json.dumps(parts, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha1(raw.encode()).hexdigest()[:10]


class _Ids:
    """Ids unique within a conversation and tied to the content they name."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self, kind: str, *content: object) -> str:
        self.n += 1
        return f"{kind}{self.n}-{_digest(kind, *content)}"


def materialize(specs: Sequence[TurnSpec]) -> list[BaseMessage]:
    ids = _Ids()
    history: list[BaseMessage] = []
    for turn in specs:
        history.append(HumanMessage(turn.human, id=ids("h", turn.human)))
        for step in turn.steps:
            if not step.calls:
                text = step.answer or "ok"
                history.append(AIMessage(text, id=ids("a", text)))
                continue
            calls = [
                {"name": c.name, "args": c.args, "id": ids("call", c.name, c.args)}
                for c in step.calls
            ]
            text = step.answer or ""
            history.append(AIMessage(text, tool_calls=calls, id=ids("a", text, calls)))
            for k in step.order:
                result = step.calls[k].result
                history.append(
                    ToolMessage(result, tool_call_id=calls[k]["id"], id=ids("t", result))
                )
    return history


@dataclass(frozen=True)
class Conversation:
    history: tuple[BaseMessage, ...]
    system: str
    summary: str | None
    corrupted: bool

    @property
    def newest_human(self) -> int:
        return max(i for i, m in enumerate(self.history) if isinstance(m, HumanMessage))


_systems = st.just("") | texts(max_chars=600)
_summaries = st.none() | st.just("") | texts(max_chars=800)


@functools.cache
def _turn_lists(max_turns: int) -> st.SearchStrategy[list[tuple[int, int]]]:
    turn = st.tuples(_shapes, _seeds)
    # Hypothesis keeps most lists short; one draw in three is a long thread.
    return st.one_of(
        st.lists(turn, min_size=1, max_size=max_turns),
        st.lists(turn, min_size=1, max_size=max_turns),
        st.lists(turn, min_size=max(1, max_turns // 3), max_size=max_turns),
    )


@st.composite
def clean_conversations(draw: st.DrawFn, *, max_turns: int = 60) -> Conversation:
    """1-``max_turns`` turns, each drawn as (shape, seed) and spelled out by ``turn_spec``:
    a few draws per turn keep generation fast at 60 turns; shrinking still removes turns and
    steps and, through the scale, shortens every text."""
    scale = draw(st.integers(0, SCALE_MAX))
    specs = [turn_spec(shape, seed, scale) for shape, seed in draw(_turn_lists(max_turns))]
    return Conversation(tuple(materialize(specs)), draw(_systems), draw(_summaries), False)


# --- corruption ------------------------------------------------------------------------------

CORRUPTIONS = ("orphan_result", "missing_result", "empty_ai", "preamble")
_short_texts = texts(max_chars=200)


def _corrupt(
    draw: st.DrawFn, history: list[BaseMessage], kind: str, serial: int
) -> list[BaseMessage]:
    def tag(*content: object) -> str:
        return f"x{serial}-{_digest(kind, *content)}"

    if kind == "orphan_result":
        at = draw(st.integers(0, len(history)))
        text = draw(_short_texts)
        orphan = ToolMessage(text, tool_call_id=f"ghost-{tag()}", id=f"orphan-{tag(text)}")
        return [*history[:at], orphan, *history[at:]]
    if kind == "missing_result":
        results = [i for i, m in enumerate(history) if isinstance(m, ToolMessage)]
        if results:
            drop = draw(st.sampled_from(results))
            return [m for i, m in enumerate(history) if i != drop]
        at = draw(st.integers(1, len(history)))
        call = {"name": "search_policies", "args": {"query": "x"}, "id": f"unanswered-{tag()}"}
        unanswered = AIMessage("", tool_calls=[call], id=f"unanswered-{tag(call)}")
        return [*history[:at], unanswered, *history[at:]]
    if kind == "empty_ai":
        at = draw(st.integers(0, len(history)))
        return [*history[:at], AIMessage("", id=f"empty-{tag()}"), *history[at:]]
    # preamble: messages before the first human message
    text = draw(_short_texts)
    preamble: list[BaseMessage] = [AIMessage(text, id=f"pre-ai-{tag(text)}")]
    if draw(st.booleans()):
        result = draw(_short_texts)
        call = {"name": "lookup_hospital", "args": {"query": "y"}, "id": f"pre-call-{tag()}"}
        preamble += [
            AIMessage("", tool_calls=[call], id=f"pre-call-{tag(call)}"),
            ToolMessage(result, tool_call_id=call["id"], id=f"pre-t-{tag(result)}"),
        ]
    if draw(st.booleans()):
        preamble.append(
            ToolMessage("stale", tool_call_id=f"pre-ghost-{tag()}", id=f"pre-orphan-{tag()}")
        )
    return [*preamble, *history]


_corruption_kinds = st.lists(st.sampled_from(CORRUPTIONS), min_size=1, max_size=3)


@st.composite
def corrupted_conversations(draw: st.DrawFn, *, max_turns: int = 60) -> Conversation:
    base = draw(clean_conversations(max_turns=max_turns))
    history = list(base.history)
    for serial, kind in enumerate(draw(_corruption_kinds)):
        history = _corrupt(draw, history, kind, serial)
    return Conversation(tuple(history), base.system, base.summary, True)


def conversations(*, max_turns: int = 60) -> st.SearchStrategy[Conversation]:
    """Clean conversations, and (about a third of the time) corrupted ones."""
    return st.one_of(
        clean_conversations(max_turns=max_turns),
        clean_conversations(max_turns=max_turns),
        corrupted_conversations(max_turns=max_turns),
    )


#: Token budgets from far above any history down to very small (most newest messages refused);
#: the small ones come last so that shrinking does not drift into refusals.
budgets = st.one_of(
    st.integers(300, 3_000),
    st.integers(3_000, 30_000),
    st.integers(30_000, 400_000),
    st.integers(1, 300),
)
