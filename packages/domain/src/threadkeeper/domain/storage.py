"""What a thread keeps in storage, by kind (``GET /v1/threads/{thread_id}/storage``).

Every profile weighs the same kinds; a kind the profile does not keep is 0 there:

- ``checkpoints`` — the checkpoint state (LangGraph's checkpoint, blob and write rows, or
  the Redis keys of the thread);
- ``messages`` — messages kept beside the checkpoints they are referred to from (the
  postgres message ledger);
- ``run_records`` — the run records and the texts they name by digest (prompts, summaries);
- ``archive`` — the transcript archive (archived messages and the rolling summary);
- ``audit`` — the tool-call audit trail;
- ``feedback`` — the feedback given on the thread's runs.

The user's memory is kept per user, not per thread, and is in none of them.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

KINDS = ("checkpoints", "messages", "run_records", "archive", "audit", "feedback")
"""The kinds, in the order the API lists them."""


class StorageUsage(msgspec.Struct, frozen=True):
    """Bytes a thread keeps, by kind (see the module docstring); all 0: nothing is kept."""

    checkpoints: int = 0
    messages: int = 0
    run_records: int = 0
    archive: int = 0
    audit: int = 0
    feedback: int = 0

    @property
    def total(self) -> int:
        return sum(self.by_kind().values())

    def by_kind(self) -> dict[str, int]:
        """``{kind: bytes}`` for every kind, in ``KINDS`` order."""
        return {kind: int(getattr(self, kind)) for kind in KINDS}

    @classmethod
    def of(cls, sizes: Mapping[str, int]) -> StorageUsage:
        """From ``{kind: bytes}`` (a kind left out is 0).

        Raises:
            ValueError: a key that is not one of ``KINDS``.
        """
        unknown = set(sizes) - set(KINDS)
        if unknown:
            raise ValueError(f"not storage kinds: {sorted(unknown)}")
        return cls(**{kind: int(size) for kind, size in sizes.items()})

    def __add__(self, other: StorageUsage) -> StorageUsage:
        return StorageUsage(**{kind: getattr(self, kind) + getattr(other, kind) for kind in KINDS})
