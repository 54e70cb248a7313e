"""Whether values a statement carried reached a log line or an exception's text (docs/pii.md:
no statement parameters in any log), and a failing statement of each kind to provoke on a
profile's real adapters."""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from threadkeeper.adapters.profile import StorageBackend
from threadkeeper.app.cli.logs import LogFormatter
from threadkeeper.app.logs import JsonFormatter
from threadkeeper.conformance.backend import Turn, store_round
from threadkeeper.domain.runs import Feedback
from threadkeeper.domain.threads import ThreadRef


def record_everything(caplog: pytest.LogCaptureFixture) -> None:
    """Every logger at DEBUG into ``caplog`` (levels put back after the test)."""
    caplog.set_level(logging.DEBUG)
    for name in list(logging.root.manager.loggerDict):
        caplog.set_level(logging.DEBUG, logger=name)


def where_seen(
    values: Iterable[str],
    records: Iterable[logging.LogRecord],
    exceptions: Iterable[BaseException] = (),
) -> list[str]:
    """Where any of ``values`` shows: a record as ``serve`` writes it (the text format with its
    traceback; the JSON format), or an exception's traceback as a logger prints it."""
    values = list(values)
    text, json_lines = LogFormatter(set()), JsonFormatter(set())
    places: list[str] = []
    for record in records:
        for formatter in (text, json_lines):
            line = formatter.format(record)
            if any(v in line for v in values):
                places.append(f"log {record.name} {record.levelname}: {line[:2000]}")
    for exc in exceptions:
        printed = "".join(traceback.format_exception(exc))
        if any(v in printed for v in values):
            places.append(f"exception {type(exc).__name__}: {printed[-2000:]}")
    return places


def assert_nowhere(
    values: Iterable[str],
    records: Iterable[logging.LogRecord],
    exceptions: Iterable[BaseException] = (),
) -> None:
    seen = where_seen(values, records, exceptions)
    kinds = sorted({place.split(":", 1)[0] for place in seen})
    assert not seen, f"{len(seen)} places ({'; '.join(kinds)}); the first:\n{seen[0]}"


@dataclass(frozen=True)
class Marked:
    """A thread whose user id, thread id and feedback comment are distinctive."""

    ref: ThreadRef
    comment: str

    @classmethod
    def make(cls) -> Marked:
        mark = uuid.uuid4().hex[:10]
        return cls(ThreadRef("acme", f"leakuser{mark}", f"leakthread{mark}"), f"leaknote{mark}")

    @property
    def values(self) -> tuple[str, ...]:
        return (self.ref.user_id, self.ref.thread_id, self.comment)


async def failing_statements(
    backend: StorageBackend, marked: Marked, drop_feedback: Callable[[], None]
) -> list[BaseException]:
    """Through the profile's own adapters: a round, the user's threads read back (rows), the
    same run stored again (a duplicate key: the driver's message may quote it) and feedback
    after ``tk_feedback`` is gone (a failing statement with the comment among its
    parameters). The two exceptions raised."""
    ref, run_id = marked.ref, str(uuid.uuid4())
    await store_round(backend, ref, Turn.make(0), run_id=run_id)
    assert await backend.runs.user_threads(ref.tenant_id, ref.user_id) == [ref.key]
    raised: list[BaseException] = []
    try:
        await store_round(backend, ref, Turn.make(1), run_id=run_id)
    except Exception as exc:
        raised.append(exc)
    else:
        pytest.fail("the same run stored twice")
    drop_feedback()
    note = Feedback(
        run_id=run_id,
        thread_key=ref.key,
        tenant_id=ref.tenant_id,
        user_id=ref.user_id,
        score=1,
        comment=marked.comment,
        at=datetime.now(UTC),
    )
    try:
        await backend.runs.add_feedback(note)
    except Exception as exc:
        raised.append(exc)
    else:
        pytest.fail("feedback stored without its table")
    return raised
