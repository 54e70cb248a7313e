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

Each figure is what is *stored*: after threadkeeper's own compression (the message ledger's
``tk1z`` rows and the run records are deflated where that is shorter), before the server's
(TOAST, InnoDB pages). ``logical`` is the same rows with that compression undone — each
deflated payload counted at its inflated length —, so a repetitive text that deflates to a few
bytes still shows its size there. Delta-encoded texts (summary versions kept as segments of an
earlier one) count their segments in both.
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
    logical: StorageUsage | None = None
    """The same kinds with threadkeeper's own compression undone; ``None``: as stored."""

    @property
    def total(self) -> int:
        return sum(self.by_kind().values())

    @property
    def uncompressed(self) -> StorageUsage:
        """:attr:`logical`, or these figures where nothing is stored compressed."""
        return self.logical if self.logical is not None else self.stored

    @property
    def stored(self) -> StorageUsage:
        """These figures without :attr:`logical`."""
        return StorageUsage.of(self.by_kind())

    def inflated_by(self, extra: Mapping[str, int]) -> StorageUsage:
        """These figures, with :attr:`logical` grown by ``extra`` bytes by kind (what the
        compressed payloads of each kind take inflated beyond their stored length)."""
        base = self.uncompressed
        grown = StorageUsage.of({k: v + int(extra.get(k, 0)) for k, v in base.by_kind().items()})
        return msgspec.structs.replace(self, logical=grown)

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
        size = {kind: int(sizes.get(kind, 0)) for kind in KINDS}
        return cls(
            checkpoints=size["checkpoints"],
            messages=size["messages"],
            run_records=size["run_records"],
            archive=size["archive"],
            audit=size["audit"],
            feedback=size["feedback"],
        )

    def __add__(self, other: StorageUsage) -> StorageUsage:
        both = StorageUsage.of({k: getattr(self, k) + getattr(other, k) for k in KINDS})
        if self.logical is None and other.logical is None:
            return both
        return msgspec.structs.replace(both, logical=self.uncompressed + other.uncompressed)
