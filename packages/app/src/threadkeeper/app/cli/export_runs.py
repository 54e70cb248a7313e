"""``threadkeeper export-runs``: the runs since a date as JSON lines (an eval dataset), users
pseudonymised."""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from threadkeeper.app.cli.common import _run_on_storage, _settings
from threadkeeper.app.cli.data import _open_output, _output
from threadkeeper.app.cli.replay import _model_call_windows
from threadkeeper.app.config import (
    Settings,
)


def _since(value: str) -> datetime:
    """A date (``2026-11-01``: midnight UTC) or an ISO 8601 time (no zone: UTC)."""
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a date (YYYY-MM-DD) or an ISO 8601 time "
            "(YYYY-MM-DDTHH:MM[:SS][+HH:MM])"
        ) from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _pseudonym(key: bytes, tenant_id: str, user_id: str) -> str:
    """The user as ``export-runs`` names them: HMAC-SHA256 under the export's own random key,
    so the same user within one export, and neither their id nor a link between exports."""
    import hashlib
    import hmac

    message = f"{tenant_id}\0{user_id}".encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:24]


def _conversation_id(trace_id_key: str | None, thread_key: str) -> str | None:
    """The thread's ``gen_ai.conversation.id`` in traces
    (``threadkeeper.app.telemetry.ConversationIds``, checked equal by the unit tests; that
    module imports the agent's middleware, which a command that reads storage does not)."""
    import hashlib
    import hmac

    if not trace_id_key:
        return None
    digest = hmac.new(trace_id_key.encode("utf-8"), thread_key.encode("utf-8"), hashlib.sha256)
    return digest.hexdigest()[:32]


def _run_line(run: Any, key: bytes, trace_id_key: str | None) -> dict[str, Any]:
    """One ``export-runs`` line (the schema is in ``docs/operations.md``)."""
    from threadkeeper.domain.transcript import stamp_of

    record, by_id = run.replay.record, run.replay.messages
    response = record.response
    human = by_id.get(record.human_message_id)
    started = stamp_of(human).get("at") if human is not None else None
    message = response.get("message") if isinstance(response.get("message"), dict) else {}
    answer = by_id.get(str(message.get("id", "")))
    model = answer.response_metadata.get("model_name") if answer is not None else None
    note = run.feedback
    return {
        "tenant_id": record.tenant_id,
        "thread_id": record.thread_id,
        "conversation": _conversation_id(trace_id_key, record.thread_key),
        "user": _pseudonym(key, record.tenant_id, record.user_id),
        "run_id": record.run_id,
        "started_at": started,
        "finished_at": record.created_at.isoformat(),
        "status": record.status,
        "model": model,
        "prompt_version": record.prompt_version,
        "chunk_ids": list(record.chunk_ids),
        "memory_keys": list(record.memory_keys),
        "model_calls": list(_model_call_windows(record, by_id)),
        "answer": {
            "id": message.get("id"),
            "content": message.get("content", ""),
            "citations": message.get("citations", []),
        },
        "handoff_context": response.get("handoff_context"),
        "usage": response.get("usage"),
        "feedback": None
        if note is None
        else {"score": note.score, "comment": note.comment, "at": note.at.isoformat()},
    }


class _ReaderGone(Exception):
    """The reader of standard output closed it (``export-runs … | head``)."""


async def _export_runs(settings: Settings, args: argparse.Namespace, out: Any) -> int:
    """Write each run's line to ``out`` (a text file) as soon as it is built, a page of
    records held at a time; how many were written.

    Raises:
        _ReaderGone: ``out`` is a pipe whose reader went away.
    """
    import secrets

    from threadkeeper.app.storage import open_stored

    key = secrets.token_bytes(32)
    written = 0
    async with open_stored(settings) as stored:
        async for run in stored.runs_since(args.since, tenant_id=args.tenant, page=args.page):
            line = _run_line(run, key, settings.trace_id_key)
            try:
                out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
                out.flush()
            except BrokenPipeError:
                break  # raised below, outside the handler: not an OSError of the storage's
            written += 1
        else:
            return written
    raise _ReaderGone(written)


def cmd_export_runs(args: argparse.Namespace) -> int:
    output = _output(args.output)
    settings = _settings()
    if output is None:
        try:
            _run_on_storage(settings, _export_runs(settings, args, sys.stdout))
        except _ReaderGone as gone:
            # no traceback, and none at exit either: what is left to flush goes nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            print(f"threadkeeper: output closed after {gone.args[0]} runs", file=sys.stderr)
            return 1
        return 0
    out = _open_output(output)
    with out:
        written = _run_on_storage(settings, _export_runs(settings, args, out))
    scope = f"tenant {args.tenant}" if args.tenant else "every tenant"
    print(
        f"threadkeeper: exported {written} runs of {scope} since {args.since.isoformat()} "
        f"to {args.output}",
        file=sys.stderr,
    )
    return 0
