"""Reading the documents back from a system prompt (``threadkeeper.domain.prompt``).

``parse_documents`` reads what the regular expressions it used to be read, element by element
and attribute by attribute, in one pass: those expressions scanned the rest of the prompt again
from every tag never closed and every attribute name never given a value (issue 6's review).
"""

from __future__ import annotations

import html
import re

from hypothesis import given, settings
from hypothesis import strategies as st

from threadkeeper.domain import prompt
from threadkeeper.domain.prompt import (
    DocumentChunk,
    parse_documents,
    render_documents,
    render_system,
)

# The reference: the regular expressions as they were.
DOCUMENTS_BLOCK = re.compile(r"<documents\b[^>]*>(.*?)</documents\s*>", re.DOTALL)
DOC = re.compile(r"<doc\b([^>]*)>(.*?)</doc\s*>", re.DOTALL)
ATTRIBUTE = re.compile(r'([A-Za-z_][\w.:-]*)\s*=\s*"([^"]*)"')


def by_regex(text: str) -> list[DocumentChunk]:
    chunks: list[DocumentChunk] = []
    seen: set[str] = set()
    for block in DOCUMENTS_BLOCK.finditer(text):
        for doc in DOC.finditer(block.group(1)):
            attributes = {k: html.unescape(v) for k, v in ATTRIBUTE.findall(doc.group(1))}
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


PIECES = [
    "<documents>", "<documents ", "<documents", "</documents>", "</documents \n>", "</documents",
    "<documentsx>", "<doc>", "<doc ", "<doc", "</doc>", "</doc  >", "</doc", "<docs>", ">", "<",
    'chunk_id="a#1"', 'chunk_id="b"', 'doc_id="d"', 'title="T &amp; C"', "chunk_id=", '="',
    '"', "=", " ", "\n", "x", "1", "1a", "-", ".", ":", "_", "é", "دو", "保险",
]  # fmt: skip


@settings(max_examples=5 * settings().max_examples, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("".join))
def test_the_documents_are_read_as_the_regular_expressions_read_them(text: str) -> None:
    assert parse_documents(text) == by_regex(text)


@settings(max_examples=5 * settings().max_examples, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=30).map("".join))
def test_elements_and_attributes_are_found_as_the_regular_expressions_find_them(
    text: str,
) -> None:
    assert list(prompt._elements(text, "doc")) == [m.groups() for m in DOC.finditer(text)]
    assert [body for _, body in prompt._elements(text, "documents")] == [
        m.group(1) for m in DOCUMENTS_BLOCK.finditer(text)
    ]
    assert list(prompt._attributes(text)) == ATTRIBUTE.findall(text)


def test_rendered_documents_are_read_back() -> None:
    chunks = [
        {"chunk_id": "dental.en#2", "doc_id": "dental.en", "title": "Dental", "text": "80% <b>"},
        {"chunk_id": "life.fa#1", "doc_id": "life.fa", "title": 'بیمه "عمر"', "text": "متن"},
    ]
    system = render_system("You are an assistant.", [{"kind": "profile", "key": "language",
                           "value": "fa"}], chunks)  # fmt: skip
    assert parse_documents(system) == [
        DocumentChunk(c["chunk_id"], c["doc_id"], c["title"], c["text"]) for c in chunks
    ]
    assert parse_documents(render_documents(chunks)) == parse_documents(system)
