"""A fresh, migrated PostgreSQL schema per test on the machine's server (never restarted)."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import psycopg

SERVER = os.environ.get("THREADKEEPER_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def schema_url(schema: str) -> str:
    joiner = "&" if "?" in SERVER else "?"
    return f"{SERVER}{joiner}options={quote(f'-csearch_path={schema}')}"


@contextmanager
def fresh_schema(*, migrate: bool = True) -> Iterator[str]:
    """A new schema (dropped afterwards); its URL, migrated unless ``migrate=False``."""
    schema = f"tk_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    url = schema_url(schema)
    try:
        if migrate:
            from threadkeeper.adapters.postgres import migrate_postgres

            asyncio.run(migrate_postgres(url))
        yield url
    finally:
        with psycopg.connect(SERVER, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
