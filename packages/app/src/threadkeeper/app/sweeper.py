"""The in-app retention sweep (``THREADKEEPER_RETENTION_SWEEP_MINUTES``).

Every replica may run it: deleting an already-deleted thread is a no-op, so concurrent sweeps
only duplicate work, never results.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from threadkeeper.app.metrics import DELETIONS
from threadkeeper.domain.retention import (
    MemorySweepable,
    MemorySweepReport,
    Sweepable,
    SweepReport,
    sweep,
    sweep_memory,
)

log = logging.getLogger(__name__)


@dataclass
class RetentionSweeper:
    retention: Sweepable
    older_than: timedelta
    interval: timedelta
    batch: int = 500
    memory: MemorySweepable | None = None
    """Also delete the memory of users idle past ``older_than`` (``RETENTION_MEMORY``)."""
    reports: list[SweepReport] = field(default_factory=list)
    memory_reports: list[MemorySweepReport] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def run_once(self) -> SweepReport:
        report = await sweep(
            self.retention, now=datetime.now(UTC), older_than=self.older_than, batch=self.batch
        )
        self.reports = [*self.reports[-9:], report]
        if report.deleted.threads:
            DELETIONS.add(report.deleted.threads, {"reason": "retention"})
            log.info(
                "retention: deleted %d threads (%d messages) idle since before %s",
                report.deleted.threads,
                report.deleted.messages,
                report.cutoff.isoformat(),
            )
        if self.memory is not None:
            memory = await sweep_memory(
                self.memory, now=datetime.now(UTC), older_than=self.older_than, batch=self.batch
            )
            self.memory_reports = [*self.memory_reports[-9:], memory]
            if memory.users:
                log.info(
                    "retention: deleted the memory of %d users (%d items) idle since before %s",
                    memory.users,
                    memory.memory_items,
                    memory.cutoff.isoformat(),
                )
        return report

    async def _loop(self) -> None:
        while True:
            try:
                await self.run_once()
            except Exception:
                log.exception("retention sweep failed; retrying at the next interval")
            await asyncio.sleep(self.interval.total_seconds())

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="threadkeeper-retention")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
