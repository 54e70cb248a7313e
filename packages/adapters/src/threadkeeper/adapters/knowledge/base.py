"""``KnowledgeBase``: per-tenant FAQ documents and one BM25 index (bm25s) per tenant.

Layout (see ``docs/knowledge-base.md``)::

    <root>/<tenant_id>/<doc_id>.json  {"doc_id", "lang", "title", "sections": [{"heading", "text"}]}
    <root>/_default/...               used by every tenant that has no folder of its own

Every section is one chunk, ``chunk_id = "<doc_id>#<n>"`` (``n`` from 1, in file order). A
tenant's chunks of all languages share one index; the tokenizer (``tokenizer.py``) keeps the
scripts apart, so a Persian query matches Persian chunks. Documents are read and validated when
the knowledge base is loaded; a tenant's index is built on its first search and cached.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from threadkeeper.adapters.knowledge.tokenizer import tokenize

__all__ = [
    "DEFAULT_MIN_SCORE",
    "DEFAULT_TENANT",
    "FaqChunk",
    "FaqDocument",
    "FaqSection",
    "KnowledgeBase",
    "KnowledgeBaseError",
    "ScoredChunk",
]

#: The folder used by every tenant that has no folder of its own.
DEFAULT_TENANT = "_default"

#: A chunk scoring below this is not relevant, and a search with no chunk above it returns []
#: (the agent then asks a clarifying question). Scores are normalized (see ``_Bm25``): 1.0 is
#: one rare query word matched once in a chunk of average length. So a single common word
#: ("insurance", "بیمه", "保险": 0.6-0.75 on the sample KB) is not enough, a single specific word
#: ("diabetes": 1.1) is, and a query that shares no word with the KB scores 0.
DEFAULT_MIN_SCORE = 1.0

_PACKAGE = "threadkeeper.adapters.knowledge"
_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


class KnowledgeBaseError(ValueError):
    """A knowledge-base file or folder is malformed."""


@dataclass(frozen=True, slots=True)
class FaqChunk:
    """One section of an FAQ document: what BM25 indexes and what a search returns."""

    chunk_id: str
    doc_id: str
    title: str
    text: str
    lang: str


@dataclass(frozen=True, slots=True)
class ScoredChunk:
    chunk: FaqChunk
    score: float


@dataclass(frozen=True, slots=True)
class FaqSection:
    heading: str
    text: str


@dataclass(frozen=True, slots=True)
class FaqDocument:
    doc_id: str
    lang: str
    title: str
    sections: tuple[FaqSection, ...]

    def chunks(self) -> list[FaqChunk]:
        return [
            FaqChunk(
                chunk_id=f"{self.doc_id}#{n}",
                doc_id=self.doc_id,
                title=self.title,
                text=f"{section.heading}\n\n{section.text}",
                lang=self.lang,
            )
            for n, section in enumerate(self.sections, start=1)
        ]

    def as_text(self) -> str:
        """The whole document: ``# title`` then ``## heading`` and the text of every section."""
        parts = [f"# {self.title}"]
        parts.extend(f"## {s.heading}\n\n{s.text}" for s in self.sections)
        return "\n\n".join(parts)


_K1 = 1.5
_B = 0.75


class _Bm25:
    """The typed face of ``bm25s.BM25`` (Lucene BM25, k1=1.5, b=0.75) over our own tokens.

    Scores are normalized so that they mean the same in a small KB and a large one: Lucene's
    BM25 times ``(k1 + 1)`` (so a query word found once in a chunk of average length adds its
    idf) divided by the idf of a word found in one chunk only. A score of 1.0 is one rare query
    word matched once in an average chunk; a word found in many chunks adds less.
    """

    __slots__ = ("_bm25", "_scale", "vocab")

    def __init__(self, corpus: Sequence[Sequence[str]]) -> None:
        import bm25s  # untyped (ignore_missing_imports); here: it brings scipy (~0.5 s)

        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(token, len(vocab)) for token in tokens] for tokens in corpus]
        self.vocab = vocab
        # Token ids + vocabulary (bm25s.tokenization.Tokenized): bm25s indexes exactly our
        # tokens, with none of its own splitting, stop words or stemming.
        self._bm25: Any = bm25s.BM25(method="lucene", k1=_K1, b=_B)
        tokenized = bm25s.tokenization.Tokenized(ids=ids, vocab=dict(vocab))
        self._bm25.index(tokenized, create_empty_token=False, show_progress=False)
        rare_idf = math.log(1 + (len(corpus) - 1 + 0.5) / (1 + 0.5))  # Lucene idf, df = 1
        self._scale = np.float32((_K1 + 1) / rare_idf)

    def scores(self, token_ids: list[int]) -> NDArray[np.float32]:
        """The normalized score of every chunk for a query of (distinct, known) token ids."""
        scores: NDArray[np.float32] = self._bm25.get_scores_from_ids(token_ids)
        return scores * self._scale


class _TenantIndex:
    __slots__ = ("_bm25", "chunks")

    def __init__(self, documents: Iterable[FaqDocument]) -> None:
        self.chunks = tuple(chunk for doc in documents for chunk in doc.chunks())
        corpus = [tokenize(f"{c.title}\n{c.text}") for c in self.chunks]
        self._bm25 = _Bm25(corpus) if self.chunks else None

    def search(self, query: str, k: int, min_score: float) -> list[ScoredChunk]:
        if self._bm25 is None or k <= 0:
            return []
        vocab = self._bm25.vocab
        # the query is the user's text: tokenized without filling the tokenizer's caches
        tokens = tokenize(query, remember=False)
        token_ids = list(dict.fromkeys(vocab[t] for t in tokens if t in vocab))
        if not token_ids:
            return []
        scores = self._bm25.scores(token_ids)
        # Stable sort: equal scores keep the chunks' file order, so results are deterministic.
        order = np.argsort(-scores, kind="stable")[:k]
        hits = [ScoredChunk(self.chunks[i], round(float(scores[i]), 4)) for i in order.tolist()]
        return [hit for hit in hits if hit.score > 0 and hit.score >= min_score]


class KnowledgeBase:
    """FAQ documents per tenant, searched with BM25. Thread-safe; share one instance."""

    def __init__(self, documents: Mapping[str, Sequence[FaqDocument]]) -> None:
        self._documents: dict[str, dict[str, FaqDocument]] = {}
        for tenant, docs in documents.items():
            by_id: dict[str, FaqDocument] = {}
            for doc in docs:
                if doc.doc_id in by_id:
                    raise KnowledgeBaseError(f"tenant {tenant!r}: duplicate doc_id {doc.doc_id!r}")
                by_id[doc.doc_id] = doc
            self._documents[tenant] = by_id
        self._indexes: dict[str, _TenantIndex] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_directory(cls, root: Path | Traversable | None = None) -> KnowledgeBase:
        """Load ``<root>/<tenant_id>/*.json``; by default the sample KB shipped in this package."""
        base: Traversable = resources.files(_PACKAGE) / "data" if root is None else root
        if not base.is_dir():
            raise KnowledgeBaseError(f"{base}: not a directory")
        documents: dict[str, list[FaqDocument]] = {}
        for folder in sorted(base.iterdir(), key=lambda t: t.name):
            if not folder.is_dir() or folder.name.startswith((".", "__")):
                continue  # .git, __pycache__, ...
            if not _ID.fullmatch(folder.name):
                raise KnowledgeBaseError(f"{folder}: not a valid tenant id")
            files = sorted(
                (f for f in folder.iterdir() if f.is_file() and f.name.endswith(".json")),
                key=lambda t: t.name,
            )
            documents[folder.name] = [_read_document(f) for f in files]
        return cls(documents)

    @staticmethod
    def prepare() -> None:
        """Import what searching needs (bm25s and scipy, about half a second): ``serve`` calls
        it at start, so that no request pays it; a command that only lists or reads documents
        (``doctor``, ``replay``) never does."""
        import bm25s  # noqa: F401

    def tenants(self) -> list[str]:
        """The tenants that have a folder (``_default`` included), sorted."""
        return sorted(self._documents)

    def resolve_tenant(self, tenant_id: str) -> str:
        """The folder that serves ``tenant_id``: its own, or ``_default``."""
        return tenant_id if tenant_id in self._documents else DEFAULT_TENANT

    def search(
        self, tenant_id: str, query: str, *, k: int = 3, min_score: float | None = None
    ) -> list[ScoredChunk]:
        """The ``k`` best chunks for ``query``, best first; [] when nothing scores ``min_score``
        (default :data:`DEFAULT_MIN_SCORE`)."""
        threshold = DEFAULT_MIN_SCORE if min_score is None else min_score
        return self._index(tenant_id).search(query, k, threshold)

    def document(self, tenant_id: str, doc_id: str) -> str | None:
        """The whole document as text (title and every section), or None if the tenant has none
        with that id."""
        doc = self.get_document(tenant_id, doc_id)
        return None if doc is None else doc.as_text()

    def get_document(self, tenant_id: str, doc_id: str) -> FaqDocument | None:
        return self._documents.get(self.resolve_tenant(tenant_id), {}).get(doc_id)

    def chunk(self, tenant_id: str, chunk_id: str) -> FaqChunk | None:
        """The chunk ``<doc_id>#<n>`` of the tenant's knowledge, or None."""
        doc_id, _, number = chunk_id.rpartition("#")
        doc = self.get_document(tenant_id, doc_id)
        if doc is None or not number.isdigit():
            return None
        chunks = doc.chunks()
        index = int(number) - 1
        return chunks[index] if 0 <= index < len(chunks) else None

    def document_ids(self, tenant_id: str) -> list[str]:
        """The tenant's document ids, sorted."""
        return sorted(self._documents.get(self.resolve_tenant(tenant_id), {}))

    def _index(self, tenant_id: str) -> _TenantIndex:
        tenant = self.resolve_tenant(tenant_id)
        index = self._indexes.get(tenant)
        if index is None:
            with self._lock:
                index = self._indexes.get(tenant)
                if index is None:
                    docs = self._documents.get(tenant, {})
                    index = _TenantIndex(docs[doc_id] for doc_id in sorted(docs))
                    self._indexes[tenant] = index
        return index


def _read_document(file: Traversable) -> FaqDocument:
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KnowledgeBaseError(f"{file}: {exc}") from exc
    if not isinstance(raw, dict):
        raise KnowledgeBaseError(f"{file}: a document is a JSON object")
    doc_id = _text(raw, "doc_id", file)
    if not _ID.fullmatch(doc_id):
        raise KnowledgeBaseError(f"{file}: doc_id {doc_id!r} must match {_ID.pattern}")
    if file.name != f"{doc_id}.json":
        raise KnowledgeBaseError(f"{file}: the file of {doc_id!r} must be named {doc_id}.json")
    sections = raw.get("sections")
    if not isinstance(sections, list) or not sections:
        raise KnowledgeBaseError(f"{file}: 'sections' must be a non-empty list")
    return FaqDocument(
        doc_id=doc_id,
        lang=_text(raw, "lang", file),
        title=_text(raw, "title", file),
        sections=tuple(_read_section(s, file) for s in sections),
    )


def _read_section(raw: object, file: Traversable) -> FaqSection:
    if not isinstance(raw, dict):
        raise KnowledgeBaseError(f"{file}: a section is an object with 'heading' and 'text'")
    return FaqSection(heading=_text(raw, "heading", file), text=_text(raw, "text", file))


def _text(raw: Mapping[str, object], key: str, file: Traversable) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise KnowledgeBaseError(f"{file}: {key!r} must be a non-empty string")
    return value.strip()
