"""Stored bytes never run code, through the API: a thread's stored row edited behind the
service's back to name a foreign callable (``tests.support.tripwire``) — the embedded profile's
SQLite ``checkpoints`` row, PostgreSQL's ``checkpoint_blobs`` row, and the message ledger's row
(``tk_checkpoint_messages``) on both — makes ``GET /messages`` and the next run answer a 500
``stored-data-refused`` problem, never a 200 with the value dropped; the callable is never
called; one log line names the type and the thread's pseudonym, not its key or content."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from litestar.testing import AsyncTestClient

from tests.api.conftest import TENANT, USER, AppFactory, Servers, run
from tests.support import tripwire
from tests.support.tripwire import FOREIGN_EXT, FOREIGN_NAME, packed, raw
from threadkeeper.adapters import ledger_codec as codec
from threadkeeper.domain.threads import log_name

PROFILES = ["embedded", pytest.param("postgres", marks=pytest.mark.integration)]
THREAD = "claims-abroad"
KEY = f"{TENANT}:{USER}:{THREAD}"
PROBLEM = "urn:threadkeeper:problem:stored-data-refused"


@pytest.fixture(params=PROFILES)
def profile(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def _no_calls() -> Iterator[None]:
    tripwire.reset()
    yield
    assert tripwire.CALLS == [], "a tripwire named by stored bytes was called"


@contextmanager
def _connection(profile: str, root: Path, servers: Servers | None) -> Iterator[Any]:
    """A connection of its own to the profile's database, committed on exit."""
    if profile == "embedded":
        with sqlite3.connect(root / "data" / "threadkeeper.sqlite3") as conn:
            yield conn
        return
    assert servers is not None
    assert servers.postgres_url is not None
    with psycopg.connect(servers.postgres_url) as conn:
        yield conn


def _plant_in_checkpoint(profile: str, conn: Any) -> None:
    """The foreign value beside the message refs in the thread's newest stored checkpoint:
    SQLite's saver keeps the whole checkpoint in the row, PostgreSQL's a blob per channel."""
    mark = "?" if profile == "embedded" else "%s"
    if profile == "embedded":
        found = conn.execute(
            f"SELECT checkpoint_id, checkpoint FROM checkpoints WHERE thread_id = {mark} "
            "ORDER BY checkpoint_id DESC LIMIT 1",
            (KEY,),
        ).fetchone()
        checkpoint = raw(bytes(found[1]))
        checkpoint["channel_values"]["messages"]["planted"] = FOREIGN_EXT
        conn.execute(
            f"UPDATE checkpoints SET checkpoint = {mark} WHERE thread_id = {mark} "
            f"AND checkpoint_id = {mark}",
            (packed(checkpoint), KEY, found[0]),
        )
        return
    rows = conn.execute(
        "SELECT version, blob FROM checkpoint_blobs WHERE thread_id = %s AND channel = 'messages'",
        (KEY,),
    ).fetchall()
    assert rows
    for version, blob in rows:
        refs = raw(bytes(blob))
        refs["planted"] = FOREIGN_EXT
        conn.execute(
            "UPDATE checkpoint_blobs SET blob = %s WHERE thread_id = %s "
            "AND channel = 'messages' AND version = %s",
            (packed(refs), KEY, version),
        )


def _plant_in_ledger(profile: str, conn: Any) -> None:
    """The foreign value in the metadata of the thread's newest message row (rewritten in the
    ledger's compact form, ``tk1``)."""
    mark = "?" if profile == "embedded" else "%s"
    seq, type_, body = conn.execute(
        f"SELECT seq, type, body FROM tk_checkpoint_messages WHERE thread_id = {mark} "
        "ORDER BY seq DESC LIMIT 1",
        (KEY,),
    ).fetchone()
    body = bytes(body)
    assert type_ in codec.FORMATS, type_
    code, fields = raw(codec.inflate(body) if type_ == codec.COMPRESSED else body)
    fields[codec.FIELDS.index("additional_kwargs")] = {"planted": FOREIGN_EXT}
    conn.execute(
        f"UPDATE tk_checkpoint_messages SET type = {mark}, body = {mark} WHERE seq = {mark}",
        (codec.COMPACT, packed([code, fields]), seq),
    )


PLANTS = {"checkpoint": _plant_in_checkpoint, "ledger": _plant_in_ledger}


@pytest.mark.parametrize("where", list(PLANTS))
async def test_a_planted_foreign_type_is_refused_as_a_problem_and_never_called(
    profile: str,
    where: str,
    make_app: AppFactory,
    auth: dict[str, str],
    tmp_path: Path,
    database: Servers | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with AsyncTestClient(make_app(), timeout=30) as client:
        client.headers.update(auth)
        await run(client, THREAD, "Is my car covered abroad?")
    with _connection(profile, tmp_path, database) as conn:
        PLANTS[where](profile, conn)

    # a new process: nothing of the thread in any cache
    async with AsyncTestClient(make_app(), timeout=30) as client:
        client.headers.update(auth)
        with caplog.at_level(logging.INFO):
            listed = await client.get(f"/v1/threads/{THREAD}/messages")
            again = await client.post(
                f"/v1/threads/{THREAD}/runs",
                json={"message": {"content": "And in Switzerland?"}},
                headers={"Accept": "application/json"},
            )
    for response in (listed, again):
        assert response.status_code == 500, response.text
        assert response.headers["content-type"].startswith("application/problem+json")
        body = response.json()
        assert body["type"] == PROBLEM, body
        assert FOREIGN_NAME not in response.text  # the client learns nothing of what is stored

    refusals = [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("threadkeeper") and FOREIGN_NAME in r.getMessage()
    ]
    assert refusals, [r.getMessage() for r in caplog.records]
    assert any(log_name(KEY) in line for line in refusals), refusals
    for line in refusals:
        for private in (KEY, THREAD, "planted", "covered abroad"):
            assert private not in line, line
