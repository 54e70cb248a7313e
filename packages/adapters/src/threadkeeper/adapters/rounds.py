"""A round as a unit of work: what one finished run stores, stored whole or not at all.

A run's checkpoint writes are staged (``AtomicSaver``) while the graph runs. When it has
finished, the profile's ``RoundStore`` stores, in one transaction of the profile's database:

- the check that the run still holds its claim on the thread (``RunFences``): a run that lost
  its lock, or whose user was erased while it ran, stores nothing (``ClaimLost``);
- the round itself — the staged checkpoints (embedded, postgres) or the archived round
  (redis-mysql, whose checkpoints are a cache written after it);
- the run record (an idempotent retry, replay and feedback depend on it: it belongs to the
  round), and the round's follow-up work (``domain.followups``: a stored round always has it,
  a refused one never).

Then the profile's upkeep runs (``after_commit``: redis-mysql keeps only the newest
checkpoint), still under the thread's lock; its failure does not touch the stored round (the
next run's upkeep catches up). ``RoundsOf.round`` is that unit of work as a backend offers it:
the run stages inside it and calls ``store`` once the graph has finished.

Once stored, ``RoundWork.written`` says the bytes the round wrote, by kind (``domain.storage``
kinds: ``checkpoints``, ``messages``, ``run_records``, ``archive``, ``audit``), counted from the
payloads its statements sent (``adapters.written``): no extra query.

Only when that transaction committed is the run acknowledged. If the connection breaks while
the transaction commits, nobody knows whether it did: the store learns it before answering
(``resolve_in_doubt``), ending the old session first so that it cannot commit later, and
raises ``CommitInDoubt`` only if the database stays out of reach.
"""

from __future__ import annotations

import asyncio
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any

import msgspec
from langgraph.checkpoint.base import BaseCheckpointSaver

from threadkeeper.adapters import written
from threadkeeper.adapters.atomic import AtomicSaver, StagedPut, Staging
from threadkeeper.domain.errors import CommitInDoubt
from threadkeeper.domain.runs import RunRecord
from threadkeeper.domain.transcript import Round, ToolInvocation

log = logging.getLogger(__name__)

RESOLVE_SECONDS = 20.0
"""How long a store tries to learn the outcome of a commit whose connection broke."""
RESOLVE_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class RoundWrite:
    """Everything one finished run stores."""

    staging: Staging
    claim: str
    """The run's claim on the thread (``RunFences.claim``)."""
    record: RunRecord
    round: Round
    """The round as the transcript keeps it (the archive, where the profile has one)."""
    tools: Sequence[ToolInvocation] = field(default_factory=tuple)
    followups: Sequence[str] = field(default_factory=tuple)
    """The kinds of follow-up work the round leaves (``domain.followups``), recorded with it."""
    written: dict[str, int] = field(default_factory=dict)
    """Bytes the commit wrote, by kind: filled while it commits (``adapters.written``)."""

    @property
    def thread_key(self) -> str:
        return self.record.thread_key

    def checkpoint_id(self) -> str | None:
        """The id of the newest staged checkpoint (the thread's head once stored)."""
        puts = [op for op in self.staging.log if isinstance(op, StagedPut)]
        return str(puts[-1].checkpoint["id"]) if puts else None

    def stored_record(self) -> RunRecord:
        return msgspec.structs.replace(self.record, checkpoint_id=self.checkpoint_id())


class RoundStore(ABC):
    """Stores a finished run's round (see the module docstring)."""

    @abstractmethod
    async def commit(self, write: RoundWrite) -> str | None:
        """Store the round whole; the thread's new head checkpoint id (``None`` where the
        checkpoints could not be written after the record was — the next run cold-starts —
        and the caller skips storage upkeep, which would fail the same way).

        Raises:
            ClaimLost: the run's claim on the thread was replaced or revoked; nothing stored.
            CommitInDoubt: the commit's outcome could not be learnt in time.
            Exception: anything else: nothing was stored.
        """


NO_BYTES: Mapping[str, int] = MappingProxyType({})


class RoundWork:
    """One run's round as a unit of work: the graph's checkpoint writes are being staged;
    ``store`` stores them whole, with the run record, in the profile's order, then runs the
    profile's upkeep. Leaving it without ``store`` stores nothing.

    After ``store``, ``written`` is the bytes the round wrote, by kind (``checkpoints``,
    ``messages``, ``run_records``, ``archive``, ``audit``; a kind it did not write is
    absent): the parameters of the statements and commands the commit sent
    (``adapters.written``). The upkeep's writes are not in it.
    """

    written: Mapping[str, int]
    """Empty until the round is stored (and when a store failed)."""

    def __init__(
        self,
        staging: Staging,
        claim: str,
        rounds: RoundStore,
        upkeep: Callable[[str], Awaitable[None]],
    ) -> None:
        self.staging = staging
        self.claim = claim
        self.rounds = rounds
        self.upkeep = upkeep
        self.stored = False
        self.written = NO_BYTES

    async def store(
        self,
        record: RunRecord,
        round: Round,
        tools: Sequence[ToolInvocation] = (),
        followups: Sequence[str] = (),
    ) -> str | None:
        """Store the round (``RoundStore.commit``), then the upkeep; the new head checkpoint
        id, ``None`` where only the record could be written (see ``commit``).

        Raises:
            ClaimLost, CommitInDoubt, Exception: as ``RoundStore.commit`` (nothing stored,
                or unknown for ``CommitInDoubt``); never for the upkeep.
        """
        if self.stored:
            raise RuntimeError("a round is stored once")
        write = RoundWrite(self.staging, self.claim, record, round, tuple(tools), tuple(followups))
        with written.tally() as counts:
            head = await self.rounds.commit(write)
        for kind, size in counts.items():
            write.written[kind] = write.written.get(kind, 0) + size
        self.written = MappingProxyType(dict(write.written))
        self.stored = True
        if head is not None:  # None: the checkpoints were not written (upkeep neither)
            try:
                await self.upkeep(write.thread_key)
            except Exception:  # the round is stored; the next run's upkeep catches up
                log.warning("storage upkeep after run %s failed", record.run_id, exc_info=True)
        return head


class RoundsOf:
    """What every backend offers for rounds, over its ``saver`` and ``rounds``: the
    checkpointer the agent's graph must be compiled with (an ``AtomicSaver``: writes inside a
    round are staged) and ``round()``. A backend overrides ``after_commit`` for upkeep."""

    saver: BaseCheckpointSaver[Any]
    rounds: RoundStore

    @cached_property
    def checkpointer(self) -> AtomicSaver:
        return AtomicSaver(self.saver)

    @contextmanager
    def round(self, thread_key: str, claim: str) -> Iterator[RoundWork]:
        """The unit of work of one run on ``thread_key`` holding ``claim``."""
        with self.checkpointer.staging(thread_key) as staging:
            yield RoundWork(staging, claim, self.rounds, self.after_commit)

    async def after_commit(self, thread_key: str) -> None:
        """Storage upkeep once a round is stored, still under the thread's lock (none)."""


async def resolve_in_doubt(
    failure: BaseException,
    *,
    end_session: Callable[[], Awaitable[None]],
    stored: Callable[[], Awaitable[bool]],
    what: str,
    seconds: float = RESOLVE_SECONDS,
) -> None:
    """After the connection broke during a commit: end the old session (so its transaction
    can no longer commit), then look whether the round is stored. Returns when it is;
    re-raises ``failure`` when it is not.

    Raises:
        CommitInDoubt: the database could not be reached within ``seconds``.
    """
    deadline = time.monotonic() + seconds
    while True:
        try:
            await end_session()
            found = await stored()
        except Exception:  # still out of reach
            if time.monotonic() >= deadline:
                log.error("the outcome of %s is unknown: the store is out of reach", what)
                raise CommitInDoubt(
                    "the store became unreachable while the round was committing; retry "
                    "with the same run_id to learn whether it was stored"
                ) from failure
            await asyncio.sleep(RESOLVE_POLL_SECONDS)
            continue
        if found:
            log.warning("%s committed although its connection broke at the commit", what)
            return
        raise failure
