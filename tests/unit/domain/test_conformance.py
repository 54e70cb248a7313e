"""The in-memory implementations pass the port conformance suites first."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import pytest

from threadkeeper.conformance.followups import FollowUpsConformance
from threadkeeper.conformance.retention import RetentionConformance
from threadkeeper.conformance.run_lock import LockFactory, RunLockConformance
from threadkeeper.conformance.run_records import RunRecordsConformance
from threadkeeper.conformance.transcript_archive import TranscriptArchiveConformance
from threadkeeper.domain.followups import MEMORY, InMemoryFollowUps
from threadkeeper.domain.locks import InMemoryRunLock
from threadkeeper.domain.retention import InMemoryRetention
from threadkeeper.domain.runs import InMemoryRunRecords, RunRecord, RunRecords
from threadkeeper.domain.threads import ThreadRef
from threadkeeper.domain.transcript import InMemoryTranscriptArchive, TranscriptArchive


class TestInMemoryRunLock(RunLockConformance):
    @pytest.fixture
    def lock_factory(self) -> LockFactory:
        shared = InMemoryRunLock()  # one process: every "client" is the same table
        return lambda: shared


class TestInMemoryTranscriptArchive(TranscriptArchiveConformance):
    @pytest.fixture
    def archive(self) -> TranscriptArchive:
        return InMemoryTranscriptArchive()


class InMemoryRetentionHarness:
    def __init__(self) -> None:
        self.retention = InMemoryRetention()

    async def seed_thread(
        self, ref: ThreadRef, *, last_activity: datetime, messages: int, feedback: int = 0
    ) -> None:
        self.retention.record_thread(
            ref.key, ref.tenant_id, ref.user_id, last_activity, messages, feedback
        )

    async def seed_memory(self, tenant_id: str, user_id: str, items: int) -> None:
        self.retention.record_memory(tenant_id, user_id, items)

    async def thread_exists(self, key: str) -> bool:
        return key in self.retention.thread_keys()


class TestInMemoryRetention(RetentionConformance):
    @pytest.fixture
    def harness(self) -> InMemoryRetentionHarness:
        return InMemoryRetentionHarness()


class TestInMemoryRunRecords(RunRecordsConformance):
    @pytest.fixture
    def records(self) -> RunRecords:
        return InMemoryRunRecords()


class InMemoryFollowUpsHarness:
    def __init__(self) -> None:
        self.followups = InMemoryFollowUps()

    async def record(self, run: RunRecord, kinds: Sequence[str] = (MEMORY,)) -> None:
        self.followups.record(kinds, run.thread_key, run.tenant_id, run.user_id, run.run_id)


class TestInMemoryFollowUps(FollowUpsConformance):
    @pytest.fixture
    def harness(self) -> InMemoryFollowUpsHarness:
        return InMemoryFollowUpsHarness()
