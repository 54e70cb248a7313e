"""The ``RetentionConformance`` harness for backends whose transcript is the checkpoints."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import msgspec
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from tests.conformance.run_records import record
from threadkeeper.domain.memory import MemoryKind, memory_namespace
from threadkeeper.domain.runs import Feedback
from threadkeeper.domain.threads import ThreadRef


class CheckpointRetentionHarness:
    """Seeds real checkpoints, run records, feedback and store items into a backend whose
    transcript is its checkpoints (embedded, postgres)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.retention = backend.retention

    async def seed_thread(
        self, ref: ThreadRef, *, last_activity: datetime, messages: int, feedback: int = 0
    ) -> None:
        history: list[Any] = []
        for index in range(messages):
            kind = HumanMessage if index % 2 == 0 else AIMessage
            history.append(kind(f"message {index}", id=f"{ref.key}-{index}"))
        checkpoint = empty_checkpoint()
        checkpoint["ts"] = last_activity.isoformat()  # the postgres profile's activity time
        checkpoint["channel_values"] = {"messages": history}
        checkpoint["channel_versions"] = {"messages": 1}
        config: dict[str, Any] = {"configurable": {"thread_id": ref.key, "checkpoint_ns": ""}}
        metadata: Any = {"tenant_id": ref.tenant_id, "user_id": ref.user_id, "step": 1}
        await self.backend.saver.aput(config, checkpoint, metadata, {"messages": 1})
        run = msgspec.structs.replace(
            record(ref.key, tenant=ref.tenant_id, user=ref.user_id), created_at=last_activity
        )
        await self.backend.runs.save(run)
        for _ in range(feedback):
            extra = record(ref.key, tenant=ref.tenant_id, user=ref.user_id)
            await self.backend.runs.save(extra)
            await self.backend.runs.add_feedback(
                Feedback(extra.run_id, ref.key, ref.tenant_id, ref.user_id, 1, None, last_activity)
            )

    async def seed_memory(self, tenant_id: str, user_id: str, items: int) -> None:
        for index in range(items):
            kind = MemoryKind.FACTS if index % 2 else MemoryKind.PROFILE
            await self.backend.store.aput(
                memory_namespace(tenant_id, user_id, kind),
                f"key-{index}-{uuid.uuid4().hex[:4]}",
                {"value": "v"},
            )

    async def thread_exists(self, key: str) -> bool:
        found = await self.backend.saver.aget_tuple({"configurable": {"thread_id": key}})
        return found is not None
