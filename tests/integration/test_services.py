"""The servers the integration suites rely on answer; in CI a missing one fails the run."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

pytestmark = pytest.mark.integration

POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
MARIADB = "mysql+asyncmy://root@127.0.0.1:3306/test"


async def test_postgres_answers() -> None:
    async with await psycopg.AsyncConnection.connect(POSTGRES, connect_timeout=5) as conn:
        row = await (await conn.execute("SELECT current_database(), 1 + 1")).fetchone()
    assert row == ("test", 2)


async def test_mariadb_answers() -> None:
    engine = create_async_engine(MARIADB)
    try:
        async with engine.connect() as conn:
            version = (await conn.execute(text("SELECT VERSION()"))).scalar_one()
    finally:
        await engine.dispose()
    assert "MariaDB" in version
