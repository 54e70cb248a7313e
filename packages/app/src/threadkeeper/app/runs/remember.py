"""Memory from a stored round: extracted, checked by ``MemoryRules``, written to the store.

The write runs after the round is stored and before the thread's lock is released (an erasure
waits for it, and so never races it), bounded; a failure never touches the answer: it is
logged, counted and retried once in the background — unless the thread was claimed since
(the user erased, or a newer run).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from langchain_core.messages import HumanMessage
from langgraph.store.base import BaseStore, PutOp

from threadkeeper.app.memory import MemoryExtractor
from threadkeeper.app.metrics import MEMORY_WRITE_FAILURES, count_memory_writes, count_refusals
from threadkeeper.app.runs.outcome import now
from threadkeeper.app.stored import load_memory
from threadkeeper.domain.extraction import RoundText
from threadkeeper.domain.locks import RunFences
from threadkeeper.domain.memory import (
    MemoryItem,
    MemoryKind,
    MemoryRules,
    Provenance,
    memory_namespace,
)
from threadkeeper.domain.threads import ThreadRef
from threadkeeper.domain.tokens import message_text

MEMORY_RETRY_DELAY_SECONDS = 1.0
MEMORY_WRITE_SECONDS = 10.0
"""The memory write after a stored round (a model-based extraction included) holds the
thread and the ``end`` event this long at most; then it is retried in the background."""
log = logging.getLogger("threadkeeper.app.runs")


class MemoryWriter:
    """Writes what a stored round teaches about its user (see the module docstring)."""

    def __init__(
        self,
        store: BaseStore,
        fences: RunFences,
        extractor: MemoryExtractor,
        rules: MemoryRules,
        profile: str = "",
    ) -> None:
        self.profile = profile
        self.store = store
        self.fences = fences
        self.extractor = extractor
        self.rules = rules
        self.background: set[asyncio.Task[None]] = set()
        """Retries in flight (shutdown waits for them)."""

    async def write_or_retry(
        self, ref: ThreadRef, human: HumanMessage, answer: str, run_id: str, claim: str
    ) -> None:
        try:
            async with asyncio.timeout(MEMORY_WRITE_SECONDS):
                await self.write(ref, human, answer)
        except Exception:
            log.warning("memory write after run %s failed; retrying once", run_id, exc_info=True)
            MEMORY_WRITE_FAILURES.add(1, {"outcome": "retrying"})
            task = asyncio.create_task(self._retry(ref, human, answer, run_id, claim))
            self.background.add(task)
            task.add_done_callback(self.background.discard)

    async def _retry(
        self, ref: ThreadRef, human: HumanMessage, answer: str, run_id: str, claim: str
    ) -> None:
        await asyncio.sleep(MEMORY_RETRY_DELAY_SECONDS)
        try:
            if not await self.fences.holds(ref.key, claim):
                MEMORY_WRITE_FAILURES.add(1, {"outcome": "lost"})
                log.warning("memory of run %s not retried: the thread was claimed since", run_id)
                return
            async with asyncio.timeout(MEMORY_WRITE_SECONDS):
                await self.write(ref, human, answer)
        except Exception:
            MEMORY_WRITE_FAILURES.add(1, {"outcome": "lost"})
            log.error("memory write after run %s failed again; not kept", run_id, exc_info=True)
        else:
            MEMORY_WRITE_FAILURES.add(1, {"outcome": "retried"})

    async def write(self, ref: ThreadRef, human: HumanMessage, answer: str) -> None:
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
            for m in await load_memory(self.store, ref.tenant_id, ref.user_id)
        ]
        plan = await self.extractor.plan(
            RoundText(
                thread_id=ref.thread_id,
                message_id=str(human.id),
                human=message_text(human),
                answer=answer,
                at=now(),
            ),
            existing,
            self.rules,
        )
        count_refusals(plan.refused)
        ttl = self.store.ttl_config.get("default_ttl") if self.store.ttl_config else None
        ops = [  # one batch, as aput and adelete would each send theirs: one transaction
            PutOp(
                memory_namespace(ref.tenant_id, ref.user_id, item.kind),
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
            PutOp(memory_namespace(ref.tenant_id, ref.user_id, kind), key, None)
            for kind, key in plan.deletes
        ]
        if ops:
            await self.store.abatch(ops)
        written: dict[str, int] = {}
        for item in plan.puts:
            written[item.kind.value] = written.get(item.kind.value, 0) + 1
        count_memory_writes(written, self.profile)
