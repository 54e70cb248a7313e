"""LangGraph's checkpoint conformance suite against the saver as threadkeeper configures it:
``AtomicSaver`` over ``AsyncPostgresSaver`` (one shared pool) and over ``AsyncSqliteSaver``.
Outside a run's staging the wrapper must behave exactly like the saver it wraps."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from pathlib import Path

import aiosqlite
import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from tests.support.postgres import fresh_schema
from threadkeeper.adapters.atomic import AtomicSaver
from threadkeeper.adapters.postgres import _pool

pytestmark = pytest.mark.integration


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_schema() as migrated:
        yield migrated


async def test_atomic_saver_over_postgres_conforms(url: str) -> None:
    @checkpointer_test(name="AtomicSaver(AsyncPostgresSaver)")
    async def saver() -> AsyncGenerator[BaseCheckpointSaver, None]:
        pool = _pool(url)
        await pool.open(wait=True)
        try:
            yield AtomicSaver(AsyncPostgresSaver(pool))
        finally:
            await pool.close()

    report = await validate(saver)
    report.print_report()
    assert report.passed_all_base(), report.to_dict()


async def test_atomic_saver_over_sqlite_conforms(tmp_path: Path) -> None:
    @checkpointer_test(name="AtomicSaver(AsyncSqliteSaver)")
    async def saver() -> AsyncGenerator[BaseCheckpointSaver, None]:
        async with aiosqlite.connect(tmp_path / "conformance.sqlite3") as conn:
            base = AsyncSqliteSaver(conn)
            await base.setup()
            yield AtomicSaver(base)

    report = await validate(saver)
    report.print_report()
    assert report.passed_all_base(), report.to_dict()
