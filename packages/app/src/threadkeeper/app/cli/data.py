"""``threadkeeper retention`` and ``threadkeeper export``: deleting idle threads, and everything
kept about one user."""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from threadkeeper.app.cli.common import _fail, _run_on_storage, _settings, _stored_user
from threadkeeper.app.config import (
    Settings,
)


def _counts(receipt: Any) -> dict[str, int]:
    return {
        "threads": receipt.threads,
        "messages": receipt.messages,
        "memory_items": receipt.memory_items,
        "feedback": receipt.feedback,
    }


async def _retention(settings: Settings, args: argparse.Namespace) -> int:
    from threadkeeper.domain.errors import InvalidDuration
    from threadkeeper.domain.retention import parse_duration, sweep, sweep_memory

    if args.older_than:
        try:
            older_than = parse_duration(args.older_than)
        except InvalidDuration as exc:
            _fail(f"--older-than: {exc}")
    elif settings.retention_days:
        older_than = parse_duration(f"{settings.retention_days}d")
    else:
        _fail("no retention window: pass --older-than or set THREADKEEPER_RETENTION_DAYS")
    now = datetime.now(UTC)
    cutoff = now - older_than
    # Deleting opens the backend as the server does (on a profile whose run locks live in
    # one process, that refuses beside a running server: a run in flight could commit into a
    # thread being deleted). Counting only reads: it works beside a server.
    from threadkeeper.app.storage import open_stored, startup_problem

    try:
        async with open_stored(settings, read_only=args.dry_run) as stored:
            if args.dry_run:
                # the threads the sweep would find now (it pages by ``batch``), and what
                # deleting them would delete
                preview = await stored.retention_preview(cutoff)
                report: dict[str, Any] = {
                    "cutoff": cutoff.isoformat(),
                    "dry_run": True,
                    "batches": math.ceil(len(preview.thread_keys) / args.batch),
                    "would_delete": _counts(preview.would_delete),
                }
                if settings.retention_memory:
                    idle = await stored.backend.retention.idle_memory(cutoff, limit=10**6)
                    report["would_delete"]["memory_users"] = len(idle)
            else:
                swept = await sweep(
                    stored.backend.retention, now=now, older_than=older_than, batch=args.batch
                )
                report = {
                    "cutoff": swept.cutoff.isoformat(),
                    "dry_run": False,
                    "batches": swept.batches,
                    "deleted": _counts(swept.deleted),
                }
                if settings.retention_memory:
                    memory = await sweep_memory(
                        stored.backend.retention, now=now, older_than=older_than, batch=args.batch
                    )
                    report["deleted"]["memory_users"] = memory.users
                    report["deleted"]["memory_items"] += memory.memory_items
    except Exception as exc:
        busy = startup_problem(exc, settings)
        if busy is None:
            raise
        _fail(
            f"a threadkeeper server is running on this data ({busy}); retention cannot delete "
            "beside it (its runs lock threads in its own process): stop it first, or let it sweep "
            "(THREADKEEPER_RETENTION_DAYS with THREADKEEPER_RETENTION_SWEEP_MINUTES); "
            "--dry-run works beside it"
        )
    print(json.dumps(report))
    return 0


def cmd_retention(args: argparse.Namespace) -> int:
    settings = _settings()
    return int(_run_on_storage(settings, _retention(settings, args)))


# -- export ------------------------------------------------------------------------------


async def _export(settings: Settings, tenant_id: str, user_id: str) -> dict[str, Any]:
    """Everything kept about the user in the tenant, read as the HTTP API reads it (bodies
    shaped as its responses)."""
    from threadkeeper.app.http.schemas import memory_out, message_out
    from threadkeeper.app.storage import open_stored

    async with open_stored(settings) as stored:
        export = await stored.export(tenant_id, user_id)
    memory = memory_out(export.memory)  # what is kept (whether work is pending is not)
    return {
        "tenant_id": export.tenant_id,
        "user_id": export.user_id,
        "exported_at": export.exported_at,
        "profile": settings.profile,
        "thread_scope": settings.thread_scope,
        "threads": [
            {"thread_id": thread_id, "messages": [message_out(m) for m in messages]}
            for thread_id, messages in export.threads
        ],
        "memory": {"profile": memory.profile, "facts": memory.facts},
        "feedback": [
            {
                "thread_id": thread_id,
                "run_id": item.run_id,
                "score": item.score,
                "comment": item.comment,
                "at": item.at,
            }
            for thread_id, item in export.feedback
        ],
    }


PRIVATE_FILE = 0o600
"""An export's mode: it holds a user's messages (``export``) or every tenant's runs."""
OUTPUT_HELP = (
    "a file to write, readable by its owner alone (0600); an existing file is overwritten, "
    "a symbolic link refused (default: standard output)"
)
_SYMLINK = (
    "--output: {output} is a symbolic link; an export is written only to a regular file, "
    "never through a link (remove the link, or name the file itself)"
)
_NOT_REGULAR = (
    "--output: {output} is not a regular file (a FIFO or a device cannot be made private): "
    "name a file, or write to standard output with --output -"
)


def _output(value: str | None) -> Path | None:
    """``--output``: ``None`` for standard output (none given, or ``-``), else the file,
    checked before any work (``_open_output`` checks it again as it opens it)."""
    if value in (None, "-"):
        return None
    output = Path(value)
    if output.is_symlink():
        _fail(_SYMLINK.format(output=output))
    if not output.parent.is_dir():
        _fail(f"--output: the folder {output.parent} does not exist")
    if output.is_dir():
        _fail(f"--output: {output} is a folder, not a file")
    return output


def _open_output(output: Path) -> Any:
    """``--output`` open to write (a text file), its owner's alone (0600): a new file is made
    so; an existing regular file of this user is overwritten, as before, and made 0600. Refused
    — left as it was — when the name is a symbolic link (even to a file: ``O_NOFOLLOW``), a
    FIFO or a device (they cannot be made private: ``--output -`` writes to standard output),
    a file of another user (who could read it) or one with other hard links."""
    import stat

    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        descriptor = os.open(output, flags, PRIVATE_FILE)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: the BSDs' word for it
            _fail(_SYMLINK.format(output=output))
        if exc.errno == errno.ENXIO:  # a FIFO no one reads
            _fail(_NOT_REGULAR.format(output=output))
        _fail(f"--output: cannot write {output}: {exc.strerror or exc}")
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            _fail(_NOT_REGULAR.format(output=output))
        if found.st_uid != os.geteuid():
            _fail(f"--output: {output} belongs to another user, who could read the export")
        if found.st_nlink > 1:
            _fail(f"--output: {output} has other hard links, which would show the export")
        os.fchmod(descriptor, PRIVATE_FILE)
        os.ftruncate(descriptor, 0)
        os.set_blocking(descriptor, True)
    except OSError as exc:
        os.close(descriptor)
        _fail(f"--output: cannot write {output}: {exc.strerror or exc}")
    except SystemExit:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "w", encoding="utf-8")


def cmd_export(args: argparse.Namespace) -> int:
    import msgspec

    output = _output(args.output)
    settings = _settings()
    document = msgspec.to_builtins(
        _run_on_storage(settings, _export(settings, args.tenant, _stored_user(args.user)))
    )
    text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        with _open_output(output) as out:
            out.write(text)
    except OSError as exc:
        _fail(f"--output: cannot write {output}: {exc.strerror or exc}")
    threads, memory = document["threads"], document["memory"]
    print(
        f"threadkeeper: exported {len(threads)} threads, "
        f"{sum(len(t['messages']) for t in threads)} messages, "
        f"{len(memory['profile']) + len(memory['facts'])} memory items and "
        f"{len(document['feedback'])} feedback of user {args.user} to {args.output}",
        file=sys.stderr,
    )
    return 0
