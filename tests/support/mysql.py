"""A fresh, migrated MariaDB/MySQL database per test on the machine's server (never restarted)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pymysql
from sqlalchemy.engine import make_url

SERVER = os.environ.get("THREADKEEPER_TEST_MYSQL", "mysql+asyncmy://root@127.0.0.1:3306/test")


def _admin() -> pymysql.connections.Connection:
    url = make_url(SERVER)
    return pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        autocommit=True,
    )


def connect(url: str) -> pymysql.connections.Connection:
    """A connection of the test's own to the database of ``url`` (beside the service's)."""
    parsed = make_url(url)
    return pymysql.connect(
        host=parsed.host or "127.0.0.1",
        port=parsed.port or 3306,
        user=parsed.username or "root",
        password=parsed.password or "",
        database=parsed.database,
    )


def query(url: str, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of one query on the database of ``url`` (a test looking at what the service
    stored, beside the service's own connections)."""
    with connect(url) as conn, conn.cursor() as cur:
        cur.execute(sql, params)
        return [tuple(row) for row in cur.fetchall()]


@contextmanager
def fresh_database(*, migrate: bool = True) -> Iterator[str]:
    """A new database (dropped afterwards); its URL, migrated unless ``migrate=False``."""
    name = f"tk_test_{uuid.uuid4().hex[:12]}"
    with _admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    url = make_url(SERVER).set(database=name).render_as_string(hide_password=False)
    try:
        if migrate:
            from threadkeeper.adapters.redis_mysql import migrate_redis_mysql

            asyncio.run(migrate_redis_mysql(url))
        yield url
    finally:
        with _admin() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name}")
