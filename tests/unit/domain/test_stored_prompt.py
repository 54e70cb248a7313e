"""Run records keep the system prompt without the retrieved documents' text."""

from __future__ import annotations

from threadkeeper.adapters.knowledge import KnowledgeBase
from threadkeeper.domain.runs import DOCUMENTS_REF, stored_prompt

SENT = (
    "Answer from the documents."
    "\n\n<memory>\nprofile.language: en\n</memory>"
    '\n\n<documents>\n<doc chunk_id="dental-cover.en#2" doc_id="dental-cover.en" title="T">'
    "Fillings are covered at 80%.</doc>\n</documents>"
)


def test_the_documents_block_becomes_a_reference() -> None:
    stored = stored_prompt(SENT)
    assert stored == (
        "Answer from the documents.\n\n<memory>\nprofile.language: en\n</memory>" + DOCUMENTS_REF
    )
    assert stored_prompt(stored) == stored  # stored twice: unchanged
    assert stored_prompt("No documents retrieved.") == "No documents retrieved."


def test_the_knowledge_base_finds_a_chunk_by_its_id() -> None:
    knowledge = KnowledgeBase.from_directory()
    doc_id = knowledge.document_ids("acme-insurance")[0]
    first = knowledge.chunk("acme-insurance", f"{doc_id}#1")
    assert first is not None
    assert first.chunk_id == f"{doc_id}#1"
    assert first.doc_id == doc_id
    assert knowledge.chunk("acme-insurance", f"{doc_id}#999") is None
    assert knowledge.chunk("acme-insurance", f"{doc_id}#0") is None
    assert knowledge.chunk("acme-insurance", "no-such-doc#1") is None
    assert knowledge.chunk("acme-insurance", doc_id) is None
