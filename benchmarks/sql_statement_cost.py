"""What one statement costs through SQLAlchemy's async engine on the embedded profile's
connection (``sqlite_engine``: a ``LoopConnection``), in CPU microseconds (``process_time``,
best of 5 x 300), against the same query on the raw connection; untraced, then traced
(``instrumentation.instrument_engine``, spans to a null exporter). docs/benchmarks.md, "Where
SQLAlchemy's share goes".

    .venv/bin/python benchmarks/sql_statement_cost.py
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Column, MetaData, String, Table, bindparam, select
from sqlalchemy.ext.asyncio import AsyncEngine

from threadkeeper.adapters.embedded.backend import sqlite_engine

metadata = MetaData()
table = Table("t", metadata, Column("k", String, primary_key=True), Column("v", String))
PREBUILT = select(table.c.v).where(table.c.k == bindparam("k"))


async def best_us(step: Callable[[], Awaitable[Any]], rounds: int = 300) -> float:
    for _ in range(50):
        await step()
    best = float("inf")
    for _ in range(5):
        start = time.process_time()
        for _ in range(rounds):
            await step()
        best = min(best, (time.process_time() - start) / rounds * 1e6)
    return best


async def measure(engine: AsyncEngine, label: str) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        await conn.execute(table.insert().prefix_with("OR REPLACE").values(k="a", v="b"))
    async with engine.begin() as conn:
        raw = (await conn.get_raw_connection()).driver_connection

        async def fresh() -> None:
            (await conn.execute(select(table.c.v).where(table.c.k == "a"))).first()

        async def prebuilt() -> None:
            (await conn.execute(PREBUILT, {"k": "a"})).first()

        async def driver_sql() -> None:
            (await conn.exec_driver_sql("SELECT v FROM t WHERE k = ?", ("a",))).first()

        async def on_raw() -> None:
            cursor = await raw.execute("SELECT v FROM t WHERE k = ?", ("a",))
            await cursor.fetchone()
            await cursor.close()

        steps: Sequence[tuple[str, Callable[[], Awaitable[Any]]]] = (
            ("a statement built per call", fresh),
            ("a statement built once", prebuilt),
            ("exec_driver_sql", driver_sql),
            ("the raw connection", on_raw),
        )
        for name, step in steps:
            print(f"{label:9} {name:28} {await best_us(step):6.0f} us")

    async def transaction() -> None:
        async with engine.begin() as conn:
            (await conn.execute(PREBUILT, {"k": "a"})).first()

    cost = await best_us(transaction, 100)
    print(f"{label:9} {'BEGIN IMMEDIATE + it + COMMIT':28} {cost:6.0f} us")
    await engine.dispose()


async def main() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    from threadkeeper.app import instrumentation

    class Null(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    root = Path(tempfile.mkdtemp())
    await measure(sqlite_engine(root / "untraced.db"), "untraced")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Null()))
    instrumentation._provider = provider  # what instrument_storage sets
    traced = sqlite_engine(root / "traced.db")
    assert instrumentation.instrument_engine(traced)
    await measure(traced, "traced")


if __name__ == "__main__":
    asyncio.run(main())
