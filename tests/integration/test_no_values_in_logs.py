"""The server profiles: no value of a failing statement, nor of any other, in a log line at
DEBUG or in the exception's text (docs/pii.md) — PostgreSQL's ``DETAIL: Key (…)=(…)`` and
MariaDB's ``Duplicate entry '…'`` included."""

from __future__ import annotations

from collections.abc import AsyncIterator

import psycopg
import pytest
from redis.asyncio import Redis

from tests.support.log_values import Marked, assert_nowhere, failing_statements, record_everything
from tests.support.mysql import query
from tests.support.redis_stack import PrivateRedis
from threadkeeper.adapters.postgres import PostgresBackend, open_postgres
from threadkeeper.adapters.redis_mysql import RedisMysqlBackend, open_redis_mysql

pytestmark = pytest.mark.integration


@pytest.fixture
async def postgres(url: str) -> AsyncIterator[PostgresBackend]:
    async with open_postgres(url) as opened:
        yield opened


@pytest.fixture
async def redis_mysql(redis_server: PrivateRedis, mysql: str) -> AsyncIterator[RedisMysqlBackend]:
    client = Redis.from_url(redis_server.url)
    await client.flushall()
    await client.aclose()
    async with open_redis_mysql(redis_server.url, mysql, lock_ttl_seconds=3) as opened:
        yield opened


async def test_postgres_failing_statements_leave_no_values_in_logs(
    postgres: PostgresBackend, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    def drop_feedback() -> None:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("DROP TABLE tk_feedback")

    marked = Marked.make()
    record_everything(caplog)
    raised = await failing_statements(postgres, marked, drop_feedback)
    assert_nowhere(marked.values, caplog.records, raised)


async def test_mariadb_failing_statements_leave_no_values_in_logs(
    redis_mysql: RedisMysqlBackend, mysql: str, caplog: pytest.LogCaptureFixture
) -> None:
    marked = Marked.make()
    record_everything(caplog)
    raised = await failing_statements(
        redis_mysql, marked, lambda: query(mysql, "DROP TABLE tk_feedback")
    )
    assert_nowhere(marked.values, caplog.records, raised)


SECRET = "leak'value"
"""Quoted in a driver's report of a failing statement (a quote in it, as in a name)."""

POSTGRES_FAILURES = [
    # DETAIL:  Key (k)=(…) already exists.
    ("INSERT INTO probe (k, n) VALUES (:v, 1)", "UniqueViolation", "23505"),
    # DETAIL:  Failing row contains (…, 500).
    ("INSERT INTO probe (k, n) VALUES (:v || 'x', 500)", "CheckViolation", "23514"),
    # invalid input syntax for type integer: "…"
    (
        "INSERT INTO probe (k, n) VALUES ('y', CAST(:v AS INTEGER))",
        "InvalidTextRepresentation",
        "22P02",
    ),
]


@pytest.mark.parametrize(("statement", "kind", "sqlstate"), POSTGRES_FAILURES)
async def test_postgres_reports_keep_their_kind_without_the_value(
    postgres: PostgresBackend, statement: str, kind: str, sqlstate: str
) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    async with postgres.engine.connect() as conn:
        await conn.execute(
            text("CREATE TEMPORARY TABLE probe (k text PRIMARY KEY, n int CHECK (n < 100))")
        )
        await conn.execute(text("INSERT INTO probe VALUES (:v, 1)"), {"v": SECRET})
        with pytest.raises(DBAPIError) as raised:
            await conn.execute(text(statement), {"v": SECRET})
    orig = raised.value.orig
    assert type(orig).__name__ == kind
    assert getattr(orig, "sqlstate", None) == sqlstate
    assert_nowhere([SECRET, "leak"], [], [raised.value])


MARIADB_FAILURES = [
    ("INSERT INTO probe (k, n) VALUES (:v, 1)", 1062),  # Duplicate entry '…' for key 'PRIMARY'
    ("INSERT INTO probe (k, n) VALUES ('y', :v)", 1366),  # Incorrect integer value: '…' for column
]


@pytest.mark.parametrize(("statement", "code"), MARIADB_FAILURES)
async def test_mariadb_reports_keep_their_code_without_the_value(
    redis_mysql: RedisMysqlBackend, statement: str, code: int
) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    async with redis_mysql.engine.connect() as conn:
        await conn.execute(text("CREATE TEMPORARY TABLE probe (k varchar(64) PRIMARY KEY, n int)"))
        await conn.execute(text("INSERT INTO probe VALUES (:v, 1)"), {"v": SECRET})
        with pytest.raises(DBAPIError) as raised:
            await conn.execute(text(statement), {"v": SECRET})
    assert raised.value.orig is not None
    assert raised.value.orig.args[0] == code
    assert_nowhere([SECRET, "leak"], [], [raised.value])
