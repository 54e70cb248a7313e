"""The FAQ knowledge base of the embedded demo agent: per-tenant, multilingual (fa/zh/en), BM25.

- :class:`KnowledgeBase` — documents under ``<root>/<tenant_id>/*.json`` (default: the sample KB
  in ``data/``; a tenant without a folder uses ``_default``), one bm25s index per tenant.
- :class:`FaqRetriever` — the LangChain ``BaseRetriever`` over one tenant.
- :func:`fetch_faq_document_tool` — the ``fetch_faq_document`` tool (tenant from the run config).

See ``docs/knowledge-base.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from threadkeeper.adapters.knowledge.base import (
    DEFAULT_MIN_SCORE,
    DEFAULT_TENANT,
    FaqChunk,
    FaqDocument,
    FaqSection,
    KnowledgeBase,
    KnowledgeBaseError,
    ScoredChunk,
)
from threadkeeper.adapters.knowledge.tokenizer import normalize, tokenize

if TYPE_CHECKING:
    from threadkeeper.adapters.knowledge.retriever import FaqRetriever, fetch_faq_document_tool

_LAZY = {"FaqRetriever", "fetch_faq_document_tool"}
"""Imported when first used: the retriever pulls in LangChain's retriever and tool machinery
(and langsmith), which a command reading the documents alone (``replay``) does not need."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from threadkeeper.adapters.knowledge import retriever

        return getattr(retriever, name)
    raise AttributeError(name)


__all__ = [
    "DEFAULT_MIN_SCORE",
    "DEFAULT_TENANT",
    "FaqChunk",
    "FaqDocument",
    "FaqRetriever",
    "FaqSection",
    "KnowledgeBase",
    "KnowledgeBaseError",
    "ScoredChunk",
    "fetch_faq_document_tool",
    "normalize",
    "tokenize",
]
