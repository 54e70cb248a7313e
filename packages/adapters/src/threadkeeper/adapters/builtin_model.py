"""threadkeeper's default chat model: a small, honest FAQ assistant that is deterministic,
offline and streams token by token.

It is a real ``BaseChatModel`` so ``create_agent``, LangGraph's ``stream_mode="messages"``,
callbacks and tracing treat it like any provider, and it works only from what a real model
would see — the messages it is given:

- ``SystemMessage`` text may hold a ``<documents>`` block of retrieved chunks
  (``<doc chunk_id=".." doc_id=".." title="..">html-escaped text</doc>``); other text around
  it (a ``<memory>`` block, a rolling summary, instructions) is ignored.
- The newest ``HumanMessage`` is the question; its script picks the reply language
  (Persian/Arabic script → ``fa``, CJK → ``zh``, else ``en``).
- A trailing ``ToolMessage`` is the result of the ``fetch_faq_document`` call this model made.

Decision, in order: a tool result is answered extractively from it; a request for a person,
or two clarifying replies in a row before it, escalates; a request for details calls
``fetch_faq_document`` for the best-matching document (only when that tool is bound); a
question that overlaps the retrieved chunks is answered with 1–3 sentences of the document it
is most about (section headings are never the answer while a sentence fits), citing the
chunks; otherwise a clarifying question is asked. The escalation rule, the hand-off and the
clarifying messages and the reply language are :mod:`threadkeeper.domain.escalation` (the agent
applies the same rule to the answer of any other chat model); text is compared in the folded
form of :mod:`threadkeeper.domain.text`.

Every final reply carries ``additional_kwargs["threadkeeper"] = {"status", "citations"}``;
tool-call replies carry no status. ``usage_metadata`` is set on every reply (see
:func:`estimate_input_tokens`; output tokens are the number of streamed tokens).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.language_models.base import LangSmithParams
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from langchain_core.messages.ai import UsageMetadata
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

from threadkeeper.domain.escalation import (
    CLARIFYING_QUESTIONS,
    HANDOFF_MESSAGES,
    METADATA_KEY,
    Language,
    detect_language,
    escalation_due,
)
from threadkeeper.domain.prompt import DocumentChunk, parse_documents
from threadkeeper.domain.text import (
    CJK_CLASS,
    EN_REQUEST_WORDS,
    EN_STOPWORDS,
    FA_REQUEST_WORDS,
    FA_STOPWORDS,
    ZH_REQUEST_WORDS,
    ZH_STOP_CHARS,
    ZH_STOP_WORDS,
    ZH_WEAK_STOP_CHARS,
    ZH_WEAK_STOP_WORDS,
    fold,
    is_cjk,
)
from threadkeeper.domain.tokens import IdentityMemo, SliceSums

__all__ = [
    "ANSWER_MAX_CHARS",
    "FETCH_FAQ_DOCUMENT",
    "BuiltinChatModel",
    "DocumentChunk",
    "ReplyStatus",
    "estimate_input_tokens",
    "parse_documents",
    "stream_tokens",
]

ReplyStatus = Literal["answered", "clarifying", "escalate"]

FETCH_FAQ_DOCUMENT: Final = "fetch_faq_document"
"""The one tool this model knows how to call: ``{"doc_id": str}`` → the whole document."""

ANSWER_MAX_CHARS: Final = 600
"""Upper bound of an extractive answer (one over-long sentence is cut with an ellipsis)."""

_CHUNK_ANSWER_MAX_SENTENCES: Final = 3
_TOOL_ANSWER_MAX_SENTENCES: Final = 4

# ---------------------------------------------------------------------------------------------
# Terms


_STOPWORDS: Final = EN_STOPWORDS | EN_REQUEST_WORDS | FA_STOPWORDS | FA_REQUEST_WORDS
"""Words a question never matches a sentence on: function words and words of asking."""
_ZH_STOP_CHARS: Final = ZH_STOP_CHARS | ZH_WEAK_STOP_CHARS
_ZH_STOP_BIGRAMS: Final = ZH_STOP_WORDS | ZH_WEAK_STOP_WORDS | ZH_REQUEST_WORDS
_WORD: Final = re.compile(r"[^\W_]+")
_CJK_SPLIT: Final = re.compile(f"[{CJK_CLASS}]+|[^{CJK_CLASS}]+")
_CJK_CHAR: Final = re.compile(f"[{CJK_CLASS}]")
"""One CJK character (``is_cjk``), for counting them at the regex engine's speed."""


def _stem(word: str) -> str:
    """A light English stem so "claims" meets "claim" (applied on both sides alike)."""
    if not word.isascii() or len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("ed") and len(word) > 5:
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def _content_terms(text: str) -> frozenset[str]:
    """Content terms of ``text``: CJK runs as character bigrams (bigrams with a function
    character, function words and words of asking dropped), everything else as folded,
    lightly stemmed words minus English/Persian stop words and words of asking."""
    terms: set[str] = set()
    for match in _WORD.finditer(fold(text)):
        word = match.group()
        for part in _CJK_SPLIT.findall(word):
            if is_cjk(part[0]):
                if len(part) == 1:
                    if part not in _ZH_STOP_CHARS:
                        terms.add(part)
                    continue
                for i in range(len(part) - 1):
                    bigram = part[i : i + 2]
                    if bigram not in _ZH_STOP_BIGRAMS and not set(bigram) & _ZH_STOP_CHARS:
                        terms.add(bigram)
            elif part not in _STOPWORDS:
                terms.add(_stem(part))
    return frozenset(terms)


_terms: Final = functools.lru_cache(maxsize=8192)(_content_terms)
"""``_content_terms`` of knowledge-base text (its sentences recur in every prompt); a user's
question is read uncached (``_Conversation.terms``): no cache keeps a user's words."""


_SENTENCE_BREAK: Final = re.compile(r"(?<=[.!?؟])\s+|(?<=[。！？；])")
_PAREN_OR_BREAK: Final = re.compile(r"[()（）]|" + _SENTENCE_BREAK.pattern)
_PAREN_REACH: Final = 300
"""Characters an unclosed parenthesis keeps breaks away for (a smiley ``:(`` or a cut chunk
must not make the rest of a long line one sentence)."""


def _split_sentences(line: str) -> list[str]:
    """``line`` split at its sentence breaks, but none inside parentheses ("病房（标准双人间；
    尊享版为单人间）、护理…" is one sentence). Parentheses are taken in order (a stray ``)``
    closes nothing; an unclosed ``(`` holds for ``_PAREN_REACH`` characters); one pass."""
    pieces: list[str] = []
    start = depth = 0
    opened = 0  # where the outermost open parenthesis is
    for found in _PAREN_OR_BREAK.finditer(line):
        mark = found.group()  # "" for a break after 。！？；
        if mark in ("(", "（"):
            if depth == 0:
                opened = found.start()
            depth += 1
        elif mark in (")", "）"):
            depth = max(0, depth - 1)
        elif depth == 0 or found.start() - opened > _PAREN_REACH:
            pieces.append(line[start : found.start()])
            start, depth = found.end(), 0
    pieces.append(line[start:])
    return pieces


_BULLET: Final = re.compile(r"^[\s#*•>\-–—]+")
_HEADING_MARK: Final = re.compile(r"^\s*#{1,6}\s")
_SENTENCE_END: Final = (".", "!", "。", "！", "；", "…")


@dataclass(frozen=True, slots=True)
class _Sentence:
    text: str
    heading: bool


@functools.lru_cache(maxsize=2048)  # a chunk's sentences, read again in every run it is shown
def _sentences(text: str) -> tuple[_Sentence, ...]:
    """Sentences (and lines) of ``text``, bullets and heading markers stripped.

    A sentence is a heading when its line is marked as one (``# title``, ``## heading``),
    when it is the first line of a text with more lines after it and does not end like a
    sentence (how chunks are written: ``heading\n\ntext``), or when it looks like a title
    (:func:`_is_heading`)."""
    lines = [line for line in text.splitlines() if line.strip()]
    out: list[_Sentence] = []
    for index, line in enumerate(lines):
        pieces = [_BULLET.sub("", piece).strip() for piece in _split_sentences(line.strip())]
        pieces = [piece for piece in pieces if piece]
        marked = bool(_HEADING_MARK.match(line))
        first = (
            index == 0
            and len(lines) > 1
            and len(pieces) == 1
            and not pieces[0].endswith(_SENTENCE_END)
        )
        out.extend(_Sentence(p, marked or first or _is_heading(p)) for p in pieces)
    return tuple(out)


def _is_heading(line: str) -> bool:
    """A short line without closing punctuation, e.g. a document title."""
    if line.endswith((".", "!", "?", "؟", "。", "！", "？", "；", ":", "：", "…")):
        return False
    return len(line.split()) <= 6 and len(_CJK_CHAR.findall(line)) <= 12


# ---------------------------------------------------------------------------------------------
# Lexicons


def _persian_phrase(phrase: str, suffixes: str = "") -> str:
    """A regex for a Persian phrase as whole word(s), with optional listed suffixes."""
    words = r"\s+".join(re.escape(w) for w in fold(phrase).split())
    tail = f"(?:{suffixes})?" if suffixes else ""
    return rf"(?<!\w){words}{tail}(?!\w)"


_DETAILS_EN: Final = re.compile(
    r"\b(?:details?|detailed|full|in\s+depth|elaborate)\b"
    r"|\bmore\s+(?:about|on|info|information)\b"
    r"|\b(?:whole|entire|complete)\s+(?:document|text|article|faq)\b"
    r"|\btell\s+me\s+more\b"
)
_DETAILS_FA: Final = re.compile(
    "|".join(
        [
            _persian_phrase("جزئیات", "ش|ی|ها|تان|تون|شان|شون"),
            _persian_phrase("کامل", "ش|ی|تر"),
            _persian_phrase("توضیح بیشتر"),
            _persian_phrase("توضیحات بیشتر"),
            _persian_phrase("اطلاعات بیشتر"),
            _persian_phrase("بیشتر بدانم"),
            _persian_phrase("بیشتر بدونم"),
        ]
    )
)
_DETAILS_ZH: Final = tuple(
    fold(p)
    for p in ("详细", "詳細", "详情", "詳情", "全文", "完整", "更多信息", "更多資訊", "具体内容")
)


def _asks_for_details(text: str) -> bool:
    norm = fold(text)
    return bool(
        _DETAILS_EN.search(norm) or _DETAILS_FA.search(norm) or any(p in norm for p in _DETAILS_ZH)
    )


# ---------------------------------------------------------------------------------------------
# Reading the input


def _text(message: BaseMessage) -> str:
    return str(message.text)


def _newest_human_at(messages: Sequence[BaseMessage]) -> int:
    """The index of the last human message (-1: none), read from the end."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], HumanMessage):
            return index
    return -1


@dataclass(frozen=True, slots=True)
class _ToolResult:
    doc_id: str | None
    text: str


@dataclass(frozen=True, slots=True)
class _Conversation:
    question: str
    terms: frozenset[str]
    """The question's content terms (``_content_terms``, uncached: the user's words)."""
    language: Language
    chunks: list[DocumentChunk]
    tool_results: list[_ToolResult]
    ends_with_tool_result: bool


def _read(messages: Sequence[BaseMessage]) -> _Conversation:
    system = "\n".join(_text(m) for m in messages if isinstance(m, SystemMessage))
    human_at = _newest_human_at(messages)
    question = _text(messages[human_at]) if human_at >= 0 else ""

    ends_with_tool_result = bool(messages) and isinstance(messages[-1], ToolMessage)
    tool_results: list[_ToolResult] = []
    if ends_with_tool_result:
        start = len(messages)
        while start > 0 and isinstance(messages[start - 1], ToolMessage):
            start -= 1
        requested: dict[str, str] = {}
        for message in messages[:start]:
            if isinstance(message, AIMessage):
                for call in message.tool_calls:
                    doc_id = call["args"].get("doc_id")
                    if call.get("id") and isinstance(doc_id, str):
                        requested[str(call["id"])] = doc_id
        for message in messages[start:]:
            assert isinstance(message, ToolMessage)
            if message.status == "error":
                continue
            tool_results.append(_ToolResult(requested.get(message.tool_call_id), _text(message)))

    return _Conversation(
        question=question,
        terms=_content_terms(question),
        language=detect_language(question),
        chunks=parse_documents(system),
        tool_results=tool_results,
        ends_with_tool_result=ends_with_tool_result,
    )


# ---------------------------------------------------------------------------------------------
# Composing the reply


@dataclass(frozen=True, slots=True)
class _Reply:
    content: str
    language: Language
    status: ReplyStatus | None = None
    citations: tuple[str, ...] = ()
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class _Candidate:
    sentence: str
    score: int
    in_user_script: bool
    source: int  # chunk or tool-result index
    position: int  # sentence index within the source
    heading: bool  # a title-like line: the answer only when nothing else fits
    doc: str  # the document the source belongs to


def _join(sentences: Sequence[str]) -> str:
    out = ""
    for sentence in sentences:
        if out and not out.endswith(("。", "！", "？", "；")):
            out += " "
        out += sentence
    return out


def _clip(sentence: str) -> str:
    if len(sentence) <= ANSWER_MAX_CHARS:
        return sentence
    cut = sentence[: ANSWER_MAX_CHARS - 1]
    space = cut.rfind(" ")
    if space > ANSWER_MAX_CHARS // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def _pick(
    candidates: list[_Candidate],
    limit: int,
    *,
    relevant_only: bool,
    doc_scores: Mapping[str, int] | None = None,
) -> list[_Candidate]:
    """Best candidates (user's script first, body text before title-like lines, then score,
    then order), at most ``limit`` sentences and :data:`ANSWER_MAX_CHARS` characters, in
    reading order.

    With ``doc_scores`` (how well each document matches the question), the answer is about
    one document: the best sentence is the best of the best document (:func:`_best_doc`).
    Besides the best sentence, only body sentences scoring at least half as much (same
    source) or as much (another source of the same document) are added; a sentence of
    another document only when it scores above the best document itself (its
    ``doc_scores``)."""
    ranked = sorted(
        candidates,
        key=lambda c: (not c.in_user_script, c.heading, -c.score, c.source, c.position),
    )
    if not ranked:
        return []
    best = ranked[0]
    if doc_scores is not None:
        focus = _best_doc(ranked, doc_scores)
        best = next(c for c in ranked if c.doc == focus)
    floor = max(1, math.ceil(best.score / 2)) if relevant_only else 0
    chosen = [best]
    used = len(_clip(best.sentence))
    seen = {fold(best.sentence)}
    for cand in ranked:
        if len(chosen) >= limit:
            break
        key = fold(cand.sentence)
        # other sources only when as strong as the best, other documents only when stronger
        # than the best document: keeps the answer on one document
        if cand.source == best.source:
            needed = floor
        elif cand.doc == best.doc or doc_scores is None:
            needed = max(floor, best.score)
        else:  # a sentence that holds more question terms than the whole best document
            needed = max(floor, best.score, doc_scores.get(best.doc, 0)) + 1
        if (
            cand.score < needed
            or cand.heading
            or cand.in_user_script != best.in_user_script
            or key in seen
        ):
            continue
        if used + 1 + len(cand.sentence) > ANSWER_MAX_CHARS:
            continue
        chosen.append(cand)
        used += 1 + len(cand.sentence)
        seen.add(key)
    return sorted(chosen, key=lambda c: (c.source, c.position))


def _best_doc(ranked: Sequence[_Candidate], doc_scores: Mapping[str, int]) -> str:
    """The document an answer is taken from: one with a sentence in the user's script, then
    one whose best sentence is body text, then the best ``doc_scores`` (question terms its
    title and retrieved text hold), then the best sentence score, then retrieval order."""
    tops: dict[str, _Candidate] = {}
    for cand in ranked:  # ranked best first: the first of each document is its best
        tops.setdefault(cand.doc, cand)
    return max(
        tops.values(),
        key=lambda c: (
            c.in_user_script,
            not c.heading,
            doc_scores.get(c.doc, 0),
            c.score,
            -c.source,
        ),
    ).doc


def _doc_scores(question: frozenset[str], docs: Sequence[tuple[str, str, str]]) -> dict[str, int]:
    """Per document: how many question terms its title holds plus how many all its text
    holds (``docs``: ``(doc_id, title, text)`` per chunk), so the document about the question
    beats one that merely mentions its words."""
    titles: dict[str, set[str]] = {}
    texts: dict[str, set[str]] = {}
    for doc_id, title, text in docs:
        titles.setdefault(doc_id, set()).update(question & _terms(title))
        texts.setdefault(doc_id, set()).update(question & _terms(f"{title}\n{text}"))
    return {doc_id: len(titles[doc_id]) + len(texts[doc_id]) for doc_id in titles}


_language_of: Final = functools.lru_cache(maxsize=8192)(detect_language)
"""``detect_language`` of a knowledge-base sentence (they recur in every prompt)."""


def _candidates(
    sources: Sequence[str], question: frozenset[str], language: Language, docs: Sequence[str]
) -> list[_Candidate]:
    """Every sentence of ``sources`` (of documents ``docs``) scored against the question."""
    out: list[_Candidate] = []
    for source, text in enumerate(sources):
        for position, sentence in enumerate(_sentences(text)):
            out.append(
                _Candidate(
                    sentence=sentence.text,
                    score=len(question & _terms(sentence.text)),
                    in_user_script=_language_of(sentence.text) == language,
                    source=source,
                    position=position,
                    heading=sentence.heading,
                    doc=docs[source],
                )
            )
    return out


def _answer_from_chunks(conv: _Conversation) -> _Reply | None:
    question = conv.terms
    sources = [c.text for c in conv.chunks]
    docs = [c.doc_id for c in conv.chunks]
    relevant = [c for c in _candidates(sources, question, conv.language, docs) if c.score > 0]
    doc_scores = _doc_scores(question, [(c.doc_id, c.title, c.text) for c in conv.chunks])
    chosen = _pick(relevant, _CHUNK_ANSWER_MAX_SENTENCES, relevant_only=True, doc_scores=doc_scores)
    if not chosen:
        return None
    citations = tuple(dict.fromkeys(conv.chunks[c.source].chunk_id for c in chosen))
    content = _join([_clip(c.sentence) for c in chosen])
    return _Reply(content, conv.language, "answered", citations)


def _answer_from_tool(conv: _Conversation) -> _Reply | None:
    question = conv.terms
    docs = [r.doc_id or f"tool-result-{i}" for i, r in enumerate(conv.tool_results)]
    candidates = _candidates([r.text for r in conv.tool_results], question, conv.language, docs)
    relevant = [c for c in candidates if c.score > 0]
    if relevant:
        doc_scores = _doc_scores(
            question, [(doc, "", r.text) for doc, r in zip(docs, conv.tool_results, strict=True)]
        )
        chosen = _pick(
            relevant, _TOOL_ANSWER_MAX_SENTENCES, relevant_only=True, doc_scores=doc_scores
        )
    else:  # a bare "details, please": the document's opening sentences
        preferred = [c for c in candidates if c.in_user_script] or candidates
        chosen = _pick(
            sorted(preferred, key=lambda c: (c.source, c.position))[:_TOOL_ANSWER_MAX_SENTENCES],
            _TOOL_ANSWER_MAX_SENTENCES,
            relevant_only=False,
        )
    if not chosen:
        return None
    citations: list[str] = []
    for source in dict.fromkeys(c.source for c in chosen):
        doc_id = conv.tool_results[source].doc_id
        doc_chunks = [ch for ch in conv.chunks if ch.doc_id == doc_id]
        used = [
            ch
            for ch in doc_chunks
            if any(_supports(ch, c.sentence) for c in chosen if c.source == source)
        ]
        citations.extend(ch.chunk_id for ch in (used or doc_chunks[:1]))
    content = _join([_clip(c.sentence) for c in chosen])
    return _Reply(content, conv.language, "answered", tuple(dict.fromkeys(citations)))


def _supports(chunk: DocumentChunk, sentence: str) -> bool:
    """Whether ``chunk`` holds ``sentence``: verbatim, or most of its terms."""
    if fold(sentence) in fold(chunk.text):
        return True
    terms = _terms(sentence)
    return bool(terms) and len(terms & _terms(chunk.text)) * 2 >= len(terms)


def _tool_call_id(messages: Sequence[BaseMessage], doc_id: str) -> str:
    """Deterministic call id: a short hash of the conversation and the requested doc."""
    digest = hashlib.sha256()
    for message in messages:
        calls = message.tool_calls if isinstance(message, AIMessage) else []
        digest.update(
            json.dumps(
                [message.type, _text(message), [[c["name"], c["args"]] for c in calls]],
                ensure_ascii=False,
                sort_keys=True,
                default=str,
            ).encode()
        )
    digest.update(doc_id.encode())
    return "call_" + digest.hexdigest()[:24]


def _top_doc_id(conv: _Conversation) -> str:
    """The document the question is most about (:func:`_doc_scores`; ties: retrieval order)."""
    question = conv.terms
    scores = _doc_scores(question, [(c.doc_id, c.title, c.text) for c in conv.chunks])
    order = list(dict.fromkeys(c.doc_id for c in conv.chunks))
    return max(order, key=lambda doc_id: (scores[doc_id], -order.index(doc_id)))


def _compose(messages: Sequence[BaseMessage], tool_names: frozenset[str]) -> _Reply:
    conv = _read(messages)
    lang = conv.language
    if conv.ends_with_tool_result:
        reply = _answer_from_tool(conv) if conv.tool_results else None
        if reply is None:
            reply = _answer_from_chunks(conv)
        return reply or _Reply(CLARIFYING_QUESTIONS[lang], lang, "clarifying")

    if escalation_due(messages):
        return _Reply(HANDOFF_MESSAGES[lang], lang, "escalate")

    if FETCH_FAQ_DOCUMENT in tool_names and conv.chunks and _asks_for_details(conv.question):
        doc_id = _top_doc_id(conv)
        call = ToolCall(
            name=FETCH_FAQ_DOCUMENT,
            args={"doc_id": doc_id},
            id=_tool_call_id(messages, doc_id),
            type="tool_call",
        )
        return _Reply("", lang, tool_calls=(call,))

    reply = _answer_from_chunks(conv)
    return reply or _Reply(CLARIFYING_QUESTIONS[lang], lang, "clarifying")


# ---------------------------------------------------------------------------------------------
# Tokens and usage


def stream_tokens(text: str, language: Language) -> list[str]:
    """How a reply is streamed. ``fa``/``en``: a word plus its trailing whitespace. ``zh``: one
    CJK character with any punctuation/whitespace after it attached; a run of other
    characters (digits, Latin words) stays one token. ``"".join(tokens) == text``."""
    if not text:
        return []
    if language != "zh":
        tokens = re.findall(r"\S+\s*", text)
        if not tokens:
            return [text]
        leading = text[: len(text) - len("".join(tokens))]
        tokens[0] = leading + tokens[0]
        return tokens
    # each token is sliced once from where it starts: ``tokens[-1] += char`` copied the token
    # for every character added, quadratic in a long run (issue 6's review), and a list per
    # token made the garbage collector's passes grow with the reply (superlinear CPU)
    pieces: list[str] = []
    start = 0
    previous = ""  # kind of the previous character: "cjk", "run" or "space"
    for index, char in enumerate(text):
        if is_cjk(char):
            begins = True
            previous = "cjk"
        elif char.isspace() or (previous == "cjk" and not char.isalnum()):
            begins = False  # attached to the token before (or the first token's start)
            if char.isspace():
                previous = "space"
        elif previous == "run":
            begins = False
        else:
            begins = True
            previous = "run"
        if begins and index > start:
            pieces.append(text[start:index])
            start = index
    pieces.append(text[start:])
    return pieces


_ESTIMATED: Final[IdentityMemo[tuple[int, int]]] = IdentityMemo()
"""A message object → (CJK characters, all characters) of what :func:`estimate_input_tokens`
reads from it: the window is the history's same objects run after run (issue 12: a pass over
every character of the window per model call was the builtin model's share of a late turn)."""


def _estimate_parts(message: BaseMessage) -> tuple[int, int]:
    known = _ESTIMATED.get(message)
    if known is not None:
        return known
    parts = [_text(message)]
    if isinstance(message, AIMessage):
        parts.extend(
            json.dumps(c["args"], ensure_ascii=False, sort_keys=True) for c in message.tool_calls
        )
    text = "".join(parts)
    return _ESTIMATED.put(message, (len(_CJK_CHAR.findall(text)), len(text)))


_WINDOWS: Final[SliceSums] = SliceSums(_estimate_parts, 2)
"""The sums of :func:`_estimate_parts` over the windows the model is shown: a late turn's
window is mostly the one before, so it is summed by difference, not message by message."""


def estimate_input_tokens(messages: Sequence[BaseMessage]) -> int:
    """A rough input token count: every CJK character is one token, every other four
    characters are one (over message text plus tool-call arguments as JSON). The counts are
    added per message (the same as over the joined text: a CJK character is one character),
    each message's remembered while it is the same object with the same content, and the
    history after the leading system messages summed by :data:`_WINDOWS`."""
    head = 0
    while head < len(messages) and isinstance(messages[head], SystemMessage):
        head += 1
    cjk, chars = _WINDOWS.total(messages[head:])
    for message in messages[:head]:  # the prompt: new each run (memory, documents, summary)
        message_cjk, message_chars = _estimate_parts(message)
        cjk += message_cjk
        chars += message_chars
    return cjk + math.ceil((chars - cjk) / 4)


def _usage(input_tokens: int, output_tokens: int) -> UsageMetadata:
    return UsageMetadata(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )


_SPECS: dict[int, tuple[Any, dict[str, Any]]] = {}
"""``id(tool)`` → (the tool, its OpenAI spec): ``create_agent`` binds the same tools on every
model call, and converting one walks its JSON schema (2.5% of a run's CPU, py-spy)."""


def _openai_spec(tool: Any) -> dict[str, Any]:
    if isinstance(tool, dict):
        return convert_to_openai_tool(tool)
    known = _SPECS.get(id(tool))
    if known is not None and known[0] is tool:
        return known[1]
    spec = convert_to_openai_tool(tool)
    if len(_SPECS) >= 256:  # tools are made once per agent: a full table means they are not
        _SPECS.clear()
    _SPECS[id(tool)] = (tool, spec)  # the tool is held, so its id is not reused
    return spec


def _tool_names(tools: Any) -> frozenset[str]:
    names: set[str] = set()
    for tool in tools or ():
        spec = tool if isinstance(tool, dict) else convert_to_openai_tool(tool)
        function = spec.get("function")
        name = function.get("name") if isinstance(function, dict) else spec.get("name")
        if isinstance(name, str):
            names.add(name)
    return frozenset(names)


# ---------------------------------------------------------------------------------------------
# The model


class BuiltinChatModel(BaseChatModel):
    """Deterministic, offline FAQ assistant (see the module docstring for the rules).

    ``bind_tools`` binds OpenAI-format tool specs like any provider; only a bound
    ``fetch_faq_document`` is ever called (``tool_choice="none"`` disables it). ``stop``
    sequences cut the reply text. ``token_delay_ms`` slows every streamed token (and
    ``invoke``/``ainvoke`` by the same total) for demos and concurrency tests.
    """

    model_name: str = "threadkeeper-builtin"
    token_delay_ms: float = Field(default=0.0, ge=0.0)

    @property
    def _llm_type(self) -> str:
        return "threadkeeper-builtin"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(
            ls_provider="threadkeeper", ls_model_name=self.model_name, ls_model_type="chat"
        )
        if stop:
            params["ls_stop"] = stop
        return params

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Bind tools as OpenAI-format specs (``tools=[...]``), as providers do."""
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=[_openai_spec(t) for t in tools], **kwargs)

    # -- composing --------------------------------------------------------------------------

    def _reply(
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: Mapping[str, Any]
    ) -> _Reply:
        names = (
            frozenset() if kwargs.get("tool_choice") == "none" else _tool_names(kwargs.get("tools"))
        )
        reply = _compose(messages, names)
        if stop and reply.content:
            cut = min((i for s in stop if s and (i := reply.content.find(s)) >= 0), default=-1)
            if cut >= 0:
                reply = _Reply(reply.content[:cut], reply.language, reply.status, reply.citations)
        return reply

    def _metadata(self, reply: _Reply) -> tuple[dict[str, Any], dict[str, Any]]:
        """``additional_kwargs`` and ``response_metadata`` of the reply."""
        if reply.tool_calls:
            return {}, {"model_name": self.model_name, "finish_reason": "tool_calls"}
        status = {"status": reply.status, "citations": list(reply.citations)}
        return {METADATA_KEY: status}, {"model_name": self.model_name, "finish_reason": "stop"}

    def _message(self, messages: list[BaseMessage], reply: _Reply) -> AIMessage:
        additional_kwargs, response_metadata = self._metadata(reply)
        return AIMessage(
            content=reply.content,
            tool_calls=list(reply.tool_calls),
            additional_kwargs=additional_kwargs,
            response_metadata=response_metadata,
            usage_metadata=_usage(estimate_input_tokens(messages), _output_tokens(reply)),
        )

    def _chunks(self, messages: list[BaseMessage], reply: _Reply) -> list[ChatGenerationChunk]:
        """The stream: one chunk per token, the last one carrying the metadata and usage
        (``chunk_position="last"``); a tool call is one chunk of ``tool_call_chunks``."""
        additional_kwargs, response_metadata = self._metadata(reply)
        usage = _usage(estimate_input_tokens(messages), _output_tokens(reply))
        if reply.tool_calls:
            last = AIMessageChunk(
                content="",
                tool_call_chunks=[
                    tool_call_chunk(
                        name=call["name"],
                        args=json.dumps(call["args"], ensure_ascii=False, sort_keys=True),
                        id=call["id"],
                        index=index,
                    )
                    for index, call in enumerate(reply.tool_calls)
                ],
                response_metadata=response_metadata,
                usage_metadata=usage,
                chunk_position="last",
            )
            return [ChatGenerationChunk(message=last)]
        tokens = stream_tokens(reply.content, reply.language) or [""]
        chunks = [ChatGenerationChunk(message=AIMessageChunk(content=t)) for t in tokens[:-1]]
        last = AIMessageChunk(
            content=tokens[-1],
            additional_kwargs=additional_kwargs,
            response_metadata=response_metadata,
            usage_metadata=usage,
            chunk_position="last",
        )
        chunks.append(ChatGenerationChunk(message=last))
        return chunks

    @property
    def _delay_seconds(self) -> float:
        return self.token_delay_ms / 1000.0

    # -- BaseChatModel ----------------------------------------------------------------------

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = self._reply(messages, stop, kwargs)
        if self._delay_seconds:
            time.sleep(self._delay_seconds * _stream_length(reply))
        return ChatResult(generations=[ChatGeneration(message=self._message(messages, reply))])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = self._reply(messages, stop, kwargs)
        if self._delay_seconds:
            await asyncio.sleep(self._delay_seconds * _stream_length(reply))
        return ChatResult(generations=[ChatGeneration(message=self._message(messages, reply))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        # Token callbacks are fired by BaseChatModel for every yielded chunk.
        for chunk in self._chunks(messages, self._reply(messages, stop, kwargs)):
            if self._delay_seconds:
                time.sleep(self._delay_seconds)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        # Token callbacks are fired by BaseChatModel for every yielded chunk; cancellation
        # propagates from the sleep.
        for chunk in self._chunks(messages, self._reply(messages, stop, kwargs)):
            if self._delay_seconds:
                await asyncio.sleep(self._delay_seconds)
            yield chunk


def _output_tokens(reply: _Reply) -> int:
    """Streamed tokens of the reply (a tool call counts one per call)."""
    if reply.tool_calls:
        return len(reply.tool_calls)
    return _token_count(reply.content, reply.language)


@functools.lru_cache(maxsize=4096)  # answers are the knowledge base's sentences: they recur
def _token_count(text: str, language: Language) -> int:
    return len(stream_tokens(text, language))


def _stream_length(reply: _Reply) -> int:
    """Number of chunks ``_astream`` yields for the reply (delays are applied per chunk)."""
    if reply.tool_calls:
        return 1
    return max(1, _token_count(reply.content, reply.language))
