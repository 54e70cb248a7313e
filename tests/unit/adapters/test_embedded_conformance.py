"""The embedded profile's adapters pass the same conformance suites as the in-memory ones."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from tests.conformance.retention import RetentionConformance
from tests.conformance.run_lock import LockFactory, RunLockConformance
from tests.conformance.run_records import RunRecordsConformance, record
from threadkeeper.adapters.embedded import EmbeddedBackend, open_embedded
from threadkeeper.domain.memory import MemoryKind, memory_namespace
from threadkeeper.domain.runs import Feedback, RunRecords
from threadkeeper.domain.threads import ThreadRef


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[EmbeddedBackend]:
    async with open_embedded(tmp_path / "data") as opened:
        yield opened


class TestEmbeddedRunLock(RunLockConformance):
    @pytest.fixture
    def lock_factory(self, backend: EmbeddedBackend) -> LockFactory:
        return lambda: backend.lock


class TestSqliteRunRecords(RunRecordsConformance):
    @pytest.fixture
    def records(self, backend: EmbeddedBackend) -> RunRecords:
        return backend.runs


class EmbeddedRetentionHarness:
    """Seeds real checkpoints, run records, feedback and store items."""

    def __init__(self, backend: EmbeddedBackend) -> None:
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


class TestEmbeddedRetention(RetentionConformance):
    @pytest.fixture
    def harness(self, backend: EmbeddedBackend) -> EmbeddedRetentionHarness:
        return EmbeddedRetentionHarness(backend)


async def test_a_second_open_of_the_data_dir_is_refused(tmp_path: Path) -> None:
    from threadkeeper.adapters.embedded import DataDirBusy

    async with open_embedded(tmp_path / "data"):
        with pytest.raises(DataDirBusy, match="in use by process"):
            async with open_embedded(tmp_path / "data"):
                pytest.fail("two processes on one data directory")
        async with open_embedded(tmp_path / "data", exclusive=False) as reader:
            assert (await reader.health()) == {"sqlite": "ok"}
