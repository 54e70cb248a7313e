"""The system prompt's blocks, written and read in one place.

The agent sends the model one system message: the prompt, then ``<memory>`` (what is
remembered about the user), then ``<documents>`` (the retrieved chunks, escaped). A run
record stores it with the documents' text replaced by a reference (``stored_prompt`` in
``domain.runs``), replay renders the documents again, a memory reset blanks the memory block
(``without_memory``), and the builtin model reads the documents back (``parse_documents``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

MEMORY_OPEN: Final = "\n\n<memory>\n"
MEMORY_CLOSE: Final = "\n</memory>"
DOCUMENTS_OPEN: Final = "\n\n<documents"
"""Starts the retrieved documents' block (``<documents>`` as sent, ``DOCUMENTS_REF`` as
stored): always the last block of the system prompt, its text escaped."""
DOCUMENTS_REF: Final = '\n\n<documents ref="chunk_ids"/>'


def render_memory(memory: Sequence[Mapping[str, Any]]) -> str:
    """The ``<memory>`` block: one ``kind.key: value`` line per item (a value never holds a
    line break: ``MemoryRules`` refuses them)."""
    lines = "\n".join(f"{m['kind']}.{m['key']}: {m['value']}" for m in memory)
    return f"<memory>\n{lines}\n</memory>"


def render_documents(chunks: Sequence[Mapping[str, Any]]) -> str:
    """The ``<documents>`` block (``chunk_id``, ``doc_id``, ``title``, ``text`` per chunk)."""
    docs = "\n".join(
        f'<doc chunk_id="{html.escape(c["chunk_id"])}" doc_id="{html.escape(c["doc_id"])}" '
        f'title="{html.escape(c["title"])}">{html.escape(c["text"])}</doc>'
        for c in chunks
    )
    return f"<documents>\n{docs}\n</documents>"


def render_system(
    prompt: str, memory: Sequence[Mapping[str, Any]], chunks: Sequence[Mapping[str, Any]]
) -> str:
    """The system message: prompt, then what is remembered, then the retrieved documents."""
    parts = [prompt]
    if memory:
        parts.append(render_memory(memory))
    if chunks:
        parts.append(render_documents(chunks))
    return "\n\n".join(parts)


@dataclass(frozen=True, slots=True)
class DocumentChunk:
    """One ``<doc>`` of the documents block, unescaped."""

    chunk_id: str
    doc_id: str
    title: str
    text: str


# The elements are read as the regular expressions ``<documents\b[^>]*>(.*?)</documents\s*>``
# and ``<doc\b([^>]*)>(.*?)</doc\s*>`` (DOTALL) and the attributes as
# ``([A-Za-z_][\w.:-]*)\s*=\s*"([^"]*)"`` would read them (finditer, findall), but in one pass:
# those expressions scan the rest of the text again from every opening that is never closed,
# and from every letter of a name that is never given a value (a 32 KiB prompt of "<doc "
# took a second, one long attribute name six; issue 6's review).
_WORD_CHAR: Final = re.compile(r"\w")
_CLOSE_END: Final = re.compile(r"\s*>")
_NAME_RUN: Final = re.compile(r"[\w.:-]+")
_VALUE: Final = re.compile(r'\s*=\s*"([^"]*)"')
_NAME_START: Final = re.compile(r"[A-Za-z_]")


def _elements(text: str, name: str) -> Iterator[tuple[str, str]]:
    r"""(attributes, content) of each ``<name …>…</name>`` in ``text``, as
    ``<name\b([^>]*)>(.*?)</name\s*>`` finds them, in time linear in ``text``."""
    opening, closing = "<" + name, "</" + name
    gt = -1  # the first ">" at or after the last tag's name: the same for every later tag
    close: tuple[int, int] | None = None  # the first closing tag at or after some position
    pos = 0
    while (start := text.find(opening, pos)) >= 0:
        head = start + len(opening)
        if _WORD_CHAR.match(text, head):  # not a word boundary: "<documents" is no "<doc"
            pos = start + 1
            continue
        if gt < head and (gt := text.find(">", head)) < 0:
            return  # no tag from here on has its ">"
        body = gt + 1
        if close is None or close[0] < body:
            close = _closing(text, closing, body)
            if close is None:
                return  # no tag from here on is closed
        yield text[head:gt], text[body : close[0]]
        pos = close[1]


def _closing(text: str, closing: str, pos: int) -> tuple[int, int] | None:
    r"""The span of the first ``</name\s*>`` at or after ``pos``."""
    while (start := text.find(closing, pos)) >= 0:
        end = _CLOSE_END.match(text, start + len(closing))
        if end is not None:
            return start, end.end()
        pos = start + 1
    return None


def _attributes(text: str) -> Iterator[tuple[str, str]]:
    r"""(name, value) pairs as ``([A-Za-z_][\w.:-]*)\s*=\s*"([^"]*)"`` finds them: a name is
    the rest of a run of name characters from its first letter, so a run is read once."""
    pos = 0
    while (run := _NAME_RUN.search(text, pos)) is not None:
        value = _VALUE.match(text, run.end())
        first = _NAME_START.search(text, run.start(), run.end())
        if value is not None and first is not None:
            yield text[first.start() : run.end()], value.group(1)
            pos = value.end()
        else:
            pos = run.end()


def parse_documents(text: str) -> list[DocumentChunk]:
    """The chunks of every ``<documents>`` block in ``text``, in order, first of each
    ``chunk_id`` kept. A ``<doc>`` without ``chunk_id`` is skipped; a missing ``doc_id`` is
    the ``chunk_id`` before ``#``."""
    chunks: list[DocumentChunk] = []
    seen: set[str] = set()
    for _, block in _elements(text, "documents"):
        for attributes_text, content in _elements(block, "doc"):
            attributes = {k: html.unescape(v) for k, v in _attributes(attributes_text)}
            chunk_id = attributes.get("chunk_id", "")
            if not chunk_id or chunk_id in seen:
                continue
            seen.add(chunk_id)
            chunks.append(
                DocumentChunk(
                    chunk_id=chunk_id,
                    doc_id=attributes.get("doc_id") or chunk_id.split("#", 1)[0],
                    title=attributes.get("title", ""),
                    text=html.unescape(content).strip(),
                )
            )
    return chunks


def with_documents(stored: str, chunks: Sequence[Mapping[str, Any]]) -> str:
    """A stored prompt (``DOCUMENTS_REF`` in place of the documents) with the documents
    rendered again, as the model got it."""
    if not stored.endswith(DOCUMENTS_REF):
        return stored
    return stored[: -len(DOCUMENTS_REF)] + "\n\n" + render_documents(chunks)


def prompt_as_sent(
    stored: str, chunk_ids: Sequence[str], chunk: Callable[[str], Mapping[str, Any] | None]
) -> str:
    """A run record's stored prompt with its documents rendered again, each looked up by
    ``chunk`` (its ``chunk_id``, ``doc_id``, ``title`` and ``text``; ``None``: the knowledge
    base no longer has it, shown as missing)."""
    if not stored.endswith(DOCUMENTS_REF):
        return stored
    missing = {"doc_id": "", "title": "", "text": "[missing]"}
    chunks = [chunk(chunk_id) or {"chunk_id": chunk_id, **missing} for chunk_id in chunk_ids]
    return with_documents(stored, chunks)
