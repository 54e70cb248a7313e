"""``threadkeeper`` — serve, chat, tokens, replay, migrate, retention, export, export-runs,
doctor.

Each command builds only what it uses: ``replay``, ``export``, ``export-runs``,
``retention`` and ``doctor``
open the profile's backend alone (no model, hooks, agent or knowledge-base index: a run's
documents are rendered from the knowledge base only when its prompt had some), and import
nothing else — start-up, mostly imports, is most of what a command takes.

One module per command (``serve``, ``chat`` with ``tokens``, ``replay``, ``data``: retention and
export, ``export_runs``, ``operator``: migrate and doctor), ``common`` for what they share and
``logs`` for the service's log lines; this module is the parser and ``main``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from threadkeeper.app.cli.chat import cmd_chat, cmd_tokens
from threadkeeper.app.cli.common import (
    DEFAULT_TENANT,
    DEFAULT_URL,
    DEFAULT_USER,
    TOKEN_VARIABLE,
    _counter_name,
    _Parser,
    _positive,
    _run_id,
    _tenant_or_user_arg,
    _thread_arg,
    _user_arg,
)
from threadkeeper.app.cli.data import OUTPUT_HELP, cmd_export, cmd_retention
from threadkeeper.app.cli.export_runs import _since, cmd_export_runs
from threadkeeper.app.cli.operator import cmd_doctor, cmd_migrate
from threadkeeper.app.cli.replay import cmd_replay
from threadkeeper.app.cli.serve import cmd_serve
from threadkeeper.app.config import ConfigError


def parser() -> argparse.ArgumentParser:
    root = _Parser(prog="threadkeeper", description=__doc__.split("\n\n")[0])
    commands = root.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (%(default)s)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on (%(default)s)")
    serve.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug", "trace"],
        help="threadkeeper's and uvicorn's log level (%(default)s); other libraries log "
        "warnings and errors only, unless debug or trace",
    )
    serve.set_defaults(func=cmd_serve)

    chat = commands.add_parser(
        "chat",
        help="talk to a running service in the terminal",
        description="An interactive client of a running service: type a message, the answer "
        "streams as it arrives. Ctrl-C stops the answer being streamed (the service cancels "
        "the run: nothing of that round is stored); Ctrl-D, or Ctrl-C at the prompt, quits.",
        epilog=f"environment: {TOKEN_VARIABLE} — the service token, sent as "
        "'Authorization: Bearer …' (every profile that serves a network asks for it)",
    )
    chat.add_argument("--url", default=DEFAULT_URL, help="the service (default: %(default)s)")
    chat.add_argument(
        "--thread",
        type=_thread_arg,
        help="the thread to talk in (default: a new chat-… thread)",
    )
    chat.add_argument("--tenant", default=DEFAULT_TENANT, help="X-Tenant-Id (default: %(default)s)")
    chat.add_argument("--user", default=DEFAULT_USER, help="X-User-Id (default: %(default)s)")
    chat.set_defaults(func=cmd_chat)

    tokens = commands.add_parser("tokens", help="count tokens, one stdin line per message")
    tokens.add_argument(
        "--counter",
        type=_counter_name,
        help="o200k_base, cl100k_base, estimate or a tokenizer.json path "
        "(default: THREADKEEPER_TOKENIZER)",
    )
    tokens.set_defaults(func=cmd_tokens)

    replay = commands.add_parser(
        "replay",
        help="print exactly what the model saw in a run",
        description="What the model was sent in each model call of a run, one JSON line per "
        "call after a line about the run. Works beside a running server.",
    )
    replay.add_argument("--thread", required=True, type=_thread_arg, help="the thread id")
    replay.add_argument(
        "--run", required=True, type=_run_id, help="the run_id (a UUID, any letter case)"
    )
    replay.add_argument(
        "--tenant",
        default=DEFAULT_TENANT,
        type=_tenant_or_user_arg,
        help="the thread's tenant (default: %(default)s)",
    )
    replay.add_argument(
        "--user",
        default=DEFAULT_USER,
        type=_user_arg,
        help="the thread's user (default: %(default)s)",
    )
    replay.set_defaults(func=cmd_replay)

    migrate = commands.add_parser("migrate", help="create or upgrade the schema")
    migrate.set_defaults(func=cmd_migrate)

    retention = commands.add_parser(
        "retention",
        help="delete threads idle past the window",
        description="Delete the threads idle longer than the window, in batches; print what "
        "was deleted. --dry-run prints what would be (under would_delete), and works beside "
        "a running server.",
    )
    retention.add_argument(
        "--older-than", help="e.g. 90d, 12h, 30m (default: THREADKEEPER_RETENTION_DAYS)"
    )
    retention.add_argument("--dry-run", action="store_true", help="count, delete nothing")
    retention.add_argument(
        "--batch", type=_positive, default=500, help="threads per batch (default: %(default)s)"
    )
    retention.set_defaults(func=cmd_retention)

    export = commands.add_parser(
        "export",
        help="write everything kept about one user as JSON (threads, memory, feedback)",
        description="Everything threadkeeper keeps about one user in one tenant, as JSON: "
        "their threads with the messages as GET /v1/threads/{id}/messages serves them, their "
        "memory with provenance, their feedback. Works beside a running server.",
    )
    export.add_argument("--tenant", required=True, type=_tenant_or_user_arg)
    export.add_argument("--user", required=True, type=_user_arg)
    export.add_argument("--output", help=OUTPUT_HELP)
    export.set_defaults(func=cmd_export)

    export_runs = commands.add_parser(
        "export-runs",
        help="write the runs since a date as JSON lines (an eval dataset)",
        description="One JSON line per run stored since --since (inclusive), oldest first: its "
        "tenant, thread id, the user as a pseudonym of this export, times, status, model, "
        "what each model call was sent (as replay rebuilds it), the answer with its "
        "citations, usage and feedback. Streams (a page of runs at a time). Works beside a "
        "running server. The lines hold what users wrote: personal data.",
    )
    export_runs.add_argument(
        "--since",
        required=True,
        type=_since,
        help="a date (YYYY-MM-DD, midnight UTC) or an ISO 8601 time (no zone: UTC)",
    )
    export_runs.add_argument(
        "--tenant", type=_tenant_or_user_arg, help="one tenant's runs (default: every tenant's)"
    )
    export_runs.add_argument("--output", help=OUTPUT_HELP)
    export_runs.add_argument(
        "--page", type=_positive, default=200, help="runs read at a time (default: %(default)s)"
    )
    export_runs.set_defaults(func=cmd_export_runs)

    doctor = commands.add_parser("doctor", help="check configuration and backends")
    doctor.set_defaults(func=cmd_doctor)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # --help (0), or a usage error (2): its line is printed
        return exc.code if isinstance(exc.code, int) else 2
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"threadkeeper: configuration error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # _fail: the line is printed
        return exc.code if isinstance(exc.code, int) else 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
