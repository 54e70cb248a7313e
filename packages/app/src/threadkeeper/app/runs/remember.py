"""The ``memory`` follow-up of a stored round: extracted, checked by ``MemoryRules``, written.

It runs after the run was acknowledged, in a follow-up worker (``app.followups``): the round
is read back from what was stored — its run record (the answer) and the human message it
names — so the work holds no content of its own, and a thread deleted meanwhile leaves nothing
to do. ``prepare`` is the slow part (a model-based extraction is a model call); the write it
returns is made only once the worker has announced it (``FollowUps.begin_write``), so a
deletion or erasure either cancels the work first or waits for the write.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING

from langgraph.store.base import PutOp

from threadkeeper.app.memory import MemoryExtractor
from threadkeeper.app.metrics import count_memory_writes, count_refusals
from threadkeeper.app.runs.outcome import now
from threadkeeper.app.stored import load_memory
from threadkeeper.domain.extraction import RoundText
from threadkeeper.domain.followups import FollowUp
from threadkeeper.domain.memory import (
    MemoryItem,
    MemoryKind,
    MemoryRules,
    Provenance,
    memory_namespace,
)
from threadkeeper.domain.tokens import message_text

if TYPE_CHECKING:  # the app is wired with a backend; it never imports one
    from threadkeeper.ports.storage import Backend

log = logging.getLogger("threadkeeper.app.runs")

Write = Callable[[], Awaitable[None]]


class MemoryJob:
    """Writes what a stored round teaches about its user (see the module docstring)."""

    def __init__(
        self,
        backend: Backend,
        extractor: MemoryExtractor,
        rules: MemoryRules,
        profile: str = "",
    ) -> None:
        self.backend = backend
        self.store = backend.store
        self.extractor = extractor
        self.rules = rules
        self.profile = profile

    async def prepare(self, job: FollowUp, *, last: bool) -> Write | None:
        """The write of the round's memory, planned (``None``: nothing to do — the round is
        gone, or was not answered). ``last``: the final attempt, where a model-based
        extraction that fails falls back to the rules instead of failing again.

        Raises:
            Exception: the extraction (or a read) failed: the worker retries.
        """
        record = await self.backend.runs.get(job.thread_key, job.run_id)
        if record is None or record.status != "answered":
            return None
        message = record.response.get("message")
        answer = message.get("content") if isinstance(message, dict) else None
        human_id = record.human_message_id
        found = await self.backend.transcript.replay_messages(
            job.thread_key, record.checkpoint_id, [human_id]
        )
        human = found.get(human_id)
        if human is None or not isinstance(answer, str):
            return None
        existing = [
            MemoryItem(
                kind=MemoryKind(m["kind"]),
                key=m["key"],
                value=m["value"],
                source=Provenance(
                    str(m["source"].get("thread_id", "")),
                    str(m["source"].get("message_id", "")),
                    datetime.fromisoformat(m["source"]["at"]) if m["source"].get("at") else now(),
                ),
            )
            for m in await load_memory(self.store, job.tenant_id, job.user_id)
        ]
        plan = await self.extractor.plan(
            RoundText(
                thread_id=record.thread_id,
                message_id=human_id,
                human=message_text(human),
                answer=answer,
                at=record.created_at,
            ),
            existing,
            self.rules,
            fall_back=last,
        )
        ttl = self.store.ttl_config.get("default_ttl") if self.store.ttl_config else None
        ops = [  # one batch, as aput and adelete would each send theirs: one transaction
            PutOp(
                memory_namespace(job.tenant_id, job.user_id, item.kind),
                item.key,
                {
                    "value": item.value,
                    "source": {
                        "thread_id": item.source.thread_id,
                        "message_id": item.source.message_id,
                        "at": item.source.at.isoformat(),
                    },
                },
                ttl=ttl,
            )
            for item in plan.puts
        ] + [
            PutOp(memory_namespace(job.tenant_id, job.user_id, kind), key, None)
            for kind, key in plan.deletes
        ]

        async def write() -> None:
            if ops:
                await self.store.abatch(ops)
            count_refusals(plan.refused)
            written: dict[str, int] = {}
            for item in plan.puts:
                written[item.kind.value] = written.get(item.kind.value, 0) + 1
            count_memory_writes(written, self.profile)

        return write
