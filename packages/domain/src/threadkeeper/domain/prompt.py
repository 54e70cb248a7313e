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
from collections.abc import Mapping, Sequence
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


_DOCUMENTS_BLOCK: Final = re.compile(r"<documents\b[^>]*>(.*?)</documents\s*>", re.DOTALL)
_DOC: Final = re.compile(r"<doc\b([^>]*)>(.*?)</doc\s*>", re.DOTALL)
_ATTRIBUTE: Final = re.compile(r'([A-Za-z_][\w.:-]*)\s*=\s*"([^"]*)"')


def parse_documents(text: str) -> list[DocumentChunk]:
    """The chunks of every ``<documents>`` block in ``text``, in order, first of each
    ``chunk_id`` kept. A ``<doc>`` without ``chunk_id`` is skipped; a missing ``doc_id`` is
    the ``chunk_id`` before ``#``."""
    chunks: list[DocumentChunk] = []
    seen: set[str] = set()
    for block in _DOCUMENTS_BLOCK.finditer(text):
        for doc in _DOC.finditer(block.group(1)):
            attributes = {k: html.unescape(v) for k, v in _ATTRIBUTE.findall(doc.group(1))}
            chunk_id = attributes.get("chunk_id", "")
            if not chunk_id or chunk_id in seen:
                continue
            seen.add(chunk_id)
            chunks.append(
                DocumentChunk(
                    chunk_id=chunk_id,
                    doc_id=attributes.get("doc_id") or chunk_id.split("#", 1)[0],
                    title=attributes.get("title", ""),
                    text=html.unescape(doc.group(2)).strip(),
                )
            )
    return chunks


def with_documents(stored: str, chunks: Sequence[Mapping[str, Any]]) -> str:
    """A stored prompt (``DOCUMENTS_REF`` in place of the documents) with the documents
    rendered again, as the model got it."""
    if not stored.endswith(DOCUMENTS_REF):
        return stored
    return stored[: -len(DOCUMENTS_REF)] + "\n\n" + render_documents(chunks)
