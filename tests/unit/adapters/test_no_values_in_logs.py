"""The embedded profile: no value of a failing statement, nor of any other, in a log line at
DEBUG or in the exception's text (docs/pii.md)."""

from __future__ import annotations

import sqlite3

import pytest

from tests.support.log_values import Marked, assert_nowhere, failing_statements, record_everything
from threadkeeper.adapters.embedded import EmbeddedBackend
from threadkeeper.adapters.embedded.backend import DATABASE


async def test_failing_statements_leave_no_values_in_logs(
    backend: EmbeddedBackend, caplog: pytest.LogCaptureFixture
) -> None:
    def drop_feedback() -> None:
        with sqlite3.connect(backend.data_dir / DATABASE) as conn:
            conn.execute("DROP TABLE tk_feedback")

    marked = Marked.make()
    record_everything(caplog)
    raised = await failing_statements(backend, marked, drop_feedback)
    assert_nowhere(marked.values, caplog.records, raised)
