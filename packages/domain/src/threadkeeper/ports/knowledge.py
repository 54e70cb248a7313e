"""The knowledge port: the FAQ passages a run's context is given (``adapters.knowledge``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class KnowledgeChunk(Protocol):
    """One retrievable passage."""

    @property
    def chunk_id(self) -> str: ...

    @property
    def doc_id(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def text(self) -> str: ...


class KnowledgeHit(Protocol):
    """A passage and its score for one query."""

    @property
    def chunk(self) -> KnowledgeChunk: ...

    @property
    def score(self) -> float: ...


class Knowledge(Protocol):
    """The tenant's FAQ, searched."""

    def search(
        self, tenant_id: str, query: str, *, k: int = 3, min_score: float | None = None
    ) -> Sequence[KnowledgeHit]:
        """The ``k`` best passages of the tenant's FAQ for ``query``, best first; none when
        nothing scores ``min_score`` (the adapter's default when ``None``)."""
        ...
