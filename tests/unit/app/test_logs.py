"""``THREADKEEPER_LOG_FORMAT=json``: one JSON object per line, each record with the trace and
span it was logged in, an exception by its type only."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from threadkeeper.app.cli import logs as cli_logs
from threadkeeper.app.config import ConfigError, Settings, load_settings

SECRET = "zq7-secret-content-4411"


def test_json_lines_carry_the_trace_and_never_an_exceptions_text(
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings = Settings.of(log_format="json", postgres_url="postgresql://u:log-secret@pg/tk")
    tracer = TracerProvider().get_tracer("test")
    with cli_logs.serve_logging("info", settings):
        logging.getLogger("uvicorn.error").info("Started server process [1]")
        with tracer.start_as_current_span("invoke_agent threadkeeper") as span:
            try:  # a driver's message quoting a value, or a model's quoting content
                raise ValueError(f"Duplicate entry '{SECRET}' (postgresql://u:log-secret@pg/tk)")
            except ValueError:
                logging.getLogger("threadkeeper.app.runs").exception("run %s failed", "r-1")
        logging.getLogger("threadkeeper").warning("via postgresql://u:log-secret@pg/tk")
    err = capsys.readouterr().err
    assert SECRET not in err
    assert "log-secret" not in err
    lines = [json.loads(line) for line in err.splitlines()]  # every line one object
    started, failed, after = lines
    assert set(started) == {"time", "level", "logger", "message"}  # outside any span
    assert started["logger"] == "uvicorn"
    assert started["time"].endswith("+00:00")
    context = span.get_span_context()
    assert failed == {
        "time": failed["time"],
        "level": "ERROR",
        "logger": "threadkeeper.app.runs",
        "message": "run r-1 failed",
        "trace_id": trace.format_trace_id(context.trace_id),
        "span_id": trace.format_span_id(context.span_id),
        "exception_type": "ValueError",
    }
    assert after["message"] == "via postgresql://u:***@pg/tk"
    assert "trace_id" not in after


def test_text_lines_stay_as_they_were(capsys: pytest.CaptureFixture[str]) -> None:
    with (
        cli_logs.serve_logging("info", Settings.of()),
        TracerProvider().get_tracer("test").start_as_current_span("s"),
    ):
        logging.getLogger("threadkeeper").info("hello")
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith(" INFO threadkeeper: hello")


def test_the_log_format_is_text_or_json() -> None:
    assert load_settings({"THREADKEEPER_LOG_FORMAT": "json"}).log_format == "json"
    assert load_settings({}).log_format == "text"
    with pytest.raises(ConfigError, match="THREADKEEPER_LOG_FORMAT must be one of json, text"):
        load_settings({"THREADKEEPER_LOG_FORMAT": "xml"})
