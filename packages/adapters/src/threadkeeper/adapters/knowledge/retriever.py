"""The LangChain faces of the knowledge base: a ``BaseRetriever`` and the ``fetch_faq_document``
tool.

Both are synchronous at heart: a search takes well under a millisecond, so the async paths call
the sync code directly instead of hopping to a thread pool.
"""

from __future__ import annotations

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool

from threadkeeper.adapters.knowledge.base import DEFAULT_TENANT, KnowledgeBase, ScoredChunk

__all__ = ["FETCH_FAQ_DOCUMENT", "FaqRetriever", "fetch_faq_document_tool"]

FETCH_FAQ_DOCUMENT = "fetch_faq_document"


class FaqRetriever(BaseRetriever):
    """The best FAQ chunks of one tenant, as Documents (``id`` = chunk_id; metadata ``chunk_id``,
    ``doc_id``, ``title``, ``lang``, ``score``). No Documents means nothing relevant."""

    knowledge: KnowledgeBase
    tenant_id: str
    k: int = 3
    min_score: float | None = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        hits = self.knowledge.search(self.tenant_id, query, k=self.k, min_score=self.min_score)
        return [_as_document(hit) for hit in hits]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        hits = self.knowledge.search(self.tenant_id, query, k=self.k, min_score=self.min_score)
        return [_as_document(hit) for hit in hits]


def _as_document(hit: ScoredChunk) -> Document:
    chunk = hit.chunk
    return Document(
        id=chunk.chunk_id,
        page_content=chunk.text,
        metadata={
            "chunk_id": chunk.chunk_id,
            "doc_id": chunk.doc_id,
            "title": chunk.title,
            "lang": chunk.lang,
            "score": hit.score,
        },
    )


def fetch_faq_document_tool(knowledge: KnowledgeBase) -> BaseTool:
    """The ``fetch_faq_document(doc_id)`` tool.

    The tenant is ``config["configurable"]["tenant_id"]`` of the run (the ``config`` argument is
    injected by LangChain and not shown to the model); a run without one reads ``_default``.
    A chunk id (``dental-cover.en#3``) is accepted for its document. An unknown id is answered
    with a text ("No FAQ document with id ..."), not an exception, so the model can recover.
    """

    def fetch_faq_document(doc_id: str, config: RunnableConfig) -> str:
        configurable = config.get("configurable") or {}
        tenant = configurable.get("tenant_id")
        return _fetch(knowledge, tenant if isinstance(tenant, str) else DEFAULT_TENANT, doc_id)

    async def afetch_faq_document(doc_id: str, config: RunnableConfig) -> str:
        return fetch_faq_document(doc_id, config)

    return StructuredTool.from_function(
        func=fetch_faq_document,
        coroutine=afetch_faq_document,
        name=FETCH_FAQ_DOCUMENT,
        description=(
            "Fetch the whole text of one FAQ document of the insurer's knowledge base. "
            "doc_id is the document id given with a retrieved excerpt, such as "
            "'dental-cover.en' (topic, dot, language fa/zh/en). Use it when the excerpt "
            "is not enough to answer."
        ),
    )


def _fetch(knowledge: KnowledgeBase, tenant_id: str, doc_id: str) -> str:
    wanted = doc_id.strip()
    text = knowledge.document(tenant_id, wanted)
    if text is None and "#" in wanted:
        text = knowledge.document(tenant_id, wanted.partition("#")[0])
    if text is not None:
        return text
    family = [i for i in knowledge.document_ids(tenant_id) if i.rpartition(".")[0] == wanted]
    hint = f" Did you mean {', '.join(family)}?" if family else ""
    return f"No FAQ document with id {wanted!r}.{hint}"
