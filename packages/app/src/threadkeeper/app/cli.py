"""``threadkeeper`` — serve, chat, tokens, replay, migrate, retention, export, doctor."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from threadkeeper.app.config import ConfigError, Settings, describe, load_settings

DEFAULT_URL = "http://127.0.0.1:8000"


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        raise SystemExit(f"threadkeeper: configuration error: {exc}") from None


# -- serve -------------------------------------------------------------------------------


def _schema_problems(settings: Settings) -> tuple[list[str] | None, str]:
    """The server profile's schema problems (``None``: the database cannot be reached)."""
    if settings.profile == "postgres":
        from threadkeeper.adapters.postgres import check_schema as check_postgres

        server, check = "PostgreSQL", check_postgres(settings.postgres_url)
    else:
        from threadkeeper.adapters.redis_mysql import check_schema as check_mysql

        server, check = "MySQL", check_mysql(settings.mysql_url)
    try:
        return asyncio.run(check), server
    except Exception as exc:
        print(f"threadkeeper: cannot reach {server}: {exc}", file=sys.stderr)
        return None, server


def _storage(settings: Settings) -> str:
    """Where the profile keeps its data, passwords masked (the start-up line)."""
    from sqlalchemy.engine import make_url

    def masked(url: str) -> str:
        try:
            return make_url(url).render_as_string(hide_password=True)
        except Exception:  # not a URL SQLAlchemy reads: say no more than the scheme
            return url.split("://", 1)[0] + "://…"

    if settings.profile == "embedded":
        return settings.data_dir
    if settings.profile == "postgres":
        return masked(settings.postgres_url)
    return f"{masked(settings.redis_url)} + {masked(settings.mysql_url)}"


def cmd_serve(args: argparse.Namespace) -> int:
    settings = _settings()
    if settings.profile != "embedded":
        problems, server = _schema_problems(settings)
        if problems is None:
            return 2
        if problems:
            print(
                f"threadkeeper: the {server} schema is not ready ({'; '.join(problems)}): "
                "run `threadkeeper migrate` first",
                file=sys.stderr,
            )
            return 2
    try:
        return _run_server(settings, args)
    except KeyboardInterrupt:  # as uvicorn.run: Ctrl-C is a normal stop
        return 0


def _draining_server_class() -> Any:
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """One SIGTERM/SIGINT drains: uvicorn stops accepting and waits for the requests in
        flight, while the service lets its runs finish for ``grace`` seconds and then cancels
        the rest — a cancelled run leaves its thread unchanged and its client gets a 503 or an
        ``error`` event, not a dropped connection."""

        def __init__(self, config: uvicorn.Config, service: Any, grace: float) -> None:
            super().__init__(config)
            self.service = service
            self.grace = grace

        async def shutdown(self, sockets: Any = None) -> None:
            drain = asyncio.create_task(self.service.drain(self.grace))
            try:
                await super().shutdown(sockets)
            finally:
                await drain

    return DrainingServer


def _run_server(settings: Settings, args: argparse.Namespace) -> int:
    import uvicorn

    DrainingServer = _draining_server_class()

    from threadkeeper.app.application import create_app, startup_problem
    from threadkeeper.app.container import make_container
    from threadkeeper.app.telemetry import configure_tracing

    if configure_tracing():
        print("threadkeeper: exporting traces over OTLP/HTTP", file=sys.stderr)

    container = make_container(settings)
    try:
        app = create_app(settings, container=container)
    except (ConfigError, ValueError) as exc:
        print(f"threadkeeper: configuration error: {exc}", file=sys.stderr)
        return 2

    async def serve() -> int:
        # Build what the lifespan would (the backend — on embedded with the data-dir lock, held
        # from here on —, model, hooks, agent) in the server's own loop before uvicorn starts:
        # a setting that cannot work is one clear line, not a traceback from the lifespan.
        try:
            service = await container.service()  # type: ignore[misc]  # the lifespan's too
        except Exception as exc:
            await container.shutdown_resources()  # type: ignore[misc]
            print(f"threadkeeper: cannot start: {startup_problem(exc, settings)}", file=sys.stderr)
            if args.log_level == "debug":
                raise
            return 2
        print(
            f"threadkeeper {settings.profile} profile on http://{args.host}:{args.port} "
            f"(data: {_storage(settings)})",
            file=sys.stderr,
        )
        grace = settings.shutdown_grace_seconds
        config = uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
            lifespan="on",
            # the drain (below) ends every run by ``grace``; uvicorn's own cancellation of
            # requests still open comes a little later, as a last resort
            timeout_graceful_shutdown=math.ceil(grace) + 5,
        )
        server = DrainingServer(config, service, grace)
        try:
            await server.serve()
        finally:
            await container.shutdown_resources()  # type: ignore[misc]  # no-op after lifespan
        return 0 if server.started else 3

    return asyncio.run(serve())


# -- chat --------------------------------------------------------------------------------


def _headers(args: argparse.Namespace) -> dict[str, str]:
    headers = {"X-Tenant-Id": args.tenant, "X-User-Id": args.user}
    token = os.environ.get("THREADKEEPER_SERVICE_TOKEN")
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def cmd_chat(args: argparse.Namespace) -> int:
    import httpx
    from httpx_sse import connect_sse

    thread = args.thread or f"chat-{uuid.uuid4().hex[:8]}"
    print(f"thread {thread} — type a message, Ctrl-D to quit", file=sys.stderr)
    with httpx.Client(base_url=args.url, headers=_headers(args), timeout=None) as client:
        while True:
            try:
                line = input("you> ").strip()
            except EOFError:
                print(file=sys.stderr)
                return 0
            if not line:
                continue
            body = {"message": {"content": line}}
            try:
                with connect_sse(client, "POST", f"/v1/threads/{thread}/runs", json=body) as source:
                    if source.response.status_code != 200:
                        source.response.read()
                        problem = source.response.json()
                        print(f"[{problem.get('status')}] {problem.get('detail')}")
                        continue
                    print("bot> ", end="", flush=True)
                    for event in source.iter_sse():
                        data = json.loads(event.data)
                        if event.event == "messages":
                            print(data["delta"], end="", flush=True)
                        elif event.event == "end":
                            cites = ", ".join(c["title"] for c in data["message"]["citations"])
                            print(f"\n     [{data['status']}{'; ' + cites if cites else ''}]")
                        elif event.event == "error":
                            print(f"\n[error] {data.get('detail')}")
            except httpx.HTTPError as exc:
                print(f"threadkeeper: cannot reach {args.url}: {exc}", file=sys.stderr)
                return 1


# -- tokens ------------------------------------------------------------------------------


def cmd_tokens(args: argparse.Namespace) -> int:
    from threadkeeper.app.counters import counter_from_name

    counter = counter_from_name(args.counter or _settings().tokenizer)
    for line in sys.stdin:
        print(counter.count_text(line.rstrip("\n")))
    return 0


# -- replay, retention, doctor (open the backend) ----------------------------------------


async def _replay(settings: Settings, args: argparse.Namespace) -> int:
    from langchain_core.messages import AIMessage

    from threadkeeper.app.container import make_container
    from threadkeeper.app.runs import from_transcript
    from threadkeeper.domain.compaction import shown_message
    from threadkeeper.domain.threads import ThreadRef, ThreadScope

    container = make_container(settings)
    _open_beside_a_server(container, settings)
    # only the selected profile's backend is opened (Selector), when first asked for
    try:
        service = await container.service()  # type: ignore[misc]
        ref = ThreadRef(args.tenant, args.user, args.thread, ThreadScope(settings.thread_scope))
        record = await service.backend.runs.get(ref.key, args.run)
        if record is None:
            print(f"threadkeeper: no run {args.run} in thread {args.thread}", file=sys.stderr)
            return 1
        config: dict[str, Any] = {"configurable": {"thread_id": ref.key}}
        if record.checkpoint_id:
            config["configurable"]["checkpoint_id"] = record.checkpoint_id
        state = await service.agent.aget_state(config)
        if not state.values and record.checkpoint_id:
            # pruned (postgres keeps only the newest checkpoint): the newest state holds
            # every message, under the same ids
            state = await service.agent.aget_state({"configurable": {"thread_id": ref.key}})
        by_id = {str(m.id): m for m in (state.values or {}).get("messages", [])}
        archive = service.archive
        if archive is not None:
            # redis-mysql: compaction and the TTL remove older messages from the checkpoints;
            # their human and AI text stays in the archive (tool calls and results do not)
            gone = [i for call in record.model_calls for i in call.message_ids if i not in by_id]
            for kept in await archive.find(ref.key, gone):
                by_id[kept.id] = from_transcript(kept)
        print(
            json.dumps(
                {
                    "run_id": record.run_id,
                    "status": record.status,
                    "prompt_version": record.prompt_version,
                    "chunk_ids": list(record.chunk_ids),
                    "memory_keys": list(record.memory_keys),
                },
                ensure_ascii=False,
            )
        )
        prompt = _with_documents(record, container.knowledge())
        for index, call in enumerate(record.model_calls):
            system = prompt
            if call.summary:
                system = f"{system}\n\n{call.summary}"
            messages = [{"role": "system", "content": system}]
            for message_id in call.message_ids:
                message = shown_message(message_id, by_id)
                if message is None:
                    messages.append({"role": "missing", "id": message_id})
                    continue
                item: dict[str, Any] = {
                    "role": message.type,
                    "id": message_id,
                    "content": message.content,
                }
                if isinstance(message, AIMessage) and message.tool_calls:
                    item["tool_calls"] = message.tool_calls
                messages.append(item)
            print(
                json.dumps(
                    {
                        "model_call": index,
                        "tokens": call.tokens,
                        "budget": call.budget,
                        "counter": call.counter,
                        "messages": messages,
                    },
                    ensure_ascii=False,
                    default=str,
                )
            )
        return 0
    finally:
        await container.shutdown_resources()  # type: ignore[misc]


def _with_documents(record: Any, knowledge: Any) -> str:
    """The run's system prompt with its documents block rendered again from the knowledge base
    (the record stores their ``chunk_ids``, not their text); a chunk the knowledge base no
    longer has is shown as missing."""
    from threadkeeper.app.agent import render_documents
    from threadkeeper.domain.runs import DOCUMENTS_REF

    prompt: str = record.system_prompt
    if not prompt.endswith(DOCUMENTS_REF):
        return prompt
    chunks = []
    for chunk_id in record.chunk_ids:
        chunk = knowledge.chunk(record.tenant_id, chunk_id)
        chunks.append(
            {"chunk_id": chunk_id, "doc_id": "", "title": "", "text": "[missing]"}
            if chunk is None
            else {
                "chunk_id": chunk.chunk_id,
                "doc_id": chunk.doc_id,
                "title": chunk.title,
                "text": chunk.text,
            }
        )
    return prompt[: -len(DOCUMENTS_REF)] + "\n\n" + render_documents(chunks)


def _open_beside_a_server(container: Any, settings: Settings) -> None:
    """Open the embedded backend without its data-dir lock, so a command that only reads
    (replay, export, doctor, ``retention --dry-run``) works beside a running server; the
    server profiles need no such thing. SQLite in WAL mode lets readers in other processes
    see committed data while the server writes."""
    if settings.profile != "embedded":
        return
    from dependency_injector import providers

    from threadkeeper.adapters.embedded import open_embedded

    async def backend(data_dir: str) -> Any:
        async with open_embedded(data_dir, exclusive=False) as opened:
            yield opened

    container.backend.override(providers.Resource(backend, settings.data_dir))


def cmd_replay(args: argparse.Namespace) -> int:
    return asyncio.run(_replay(_settings(), args))


async def _retention(settings: Settings, args: argparse.Namespace) -> int:
    from threadkeeper.app.container import make_container
    from threadkeeper.domain.errors import InvalidDuration
    from threadkeeper.domain.retention import parse_duration, sweep

    if args.older_than:
        try:
            older_than = parse_duration(args.older_than)
        except InvalidDuration as exc:
            print(f"threadkeeper: --older-than: {exc}", file=sys.stderr)
            return 2
    elif settings.retention_days:
        older_than = parse_duration(f"{settings.retention_days}d")
    else:
        print(
            "threadkeeper: no retention window: pass --older-than or set "
            "THREADKEEPER_RETENTION_DAYS",
            file=sys.stderr,
        )
        return 2
    from threadkeeper.adapters.embedded import DataDirBusy

    container = make_container(settings)
    if args.dry_run:
        _open_beside_a_server(container, settings)  # only reads
    # Deleting takes the embedded data-dir lock: a deletion holds the thread's run lock, which
    # on embedded lives in the server's process, so beside a server a run in flight could
    # commit into a thread being deleted. Server profiles lock threads in their database.
    # only the selected profile's backend is opened (Selector), when first asked for
    try:
        try:
            backend = await container.backend()
        except DataDirBusy:
            print(
                f"threadkeeper: a threadkeeper server is running on {settings.data_dir}; "
                "retention cannot delete beside it (its runs lock threads in its own process): "
                "stop it first, or let it sweep (THREADKEEPER_RETENTION_DAYS with "
                "THREADKEEPER_RETENTION_SWEEP_MINUTES); --dry-run works beside it",
                file=sys.stderr,
            )
            return 2
        report = await sweep(
            backend.retention,
            now=datetime.now(UTC),
            older_than=older_than,
            batch=args.batch,
            dry_run=args.dry_run,
        )
        print(
            json.dumps(
                {
                    "cutoff": report.cutoff.isoformat(),
                    "dry_run": report.dry_run,
                    "batches": report.batches,
                    "deleted": {
                        "threads": report.deleted.threads,
                        "messages": report.deleted.messages,
                        "memory_items": report.deleted.memory_items,
                        "feedback": report.deleted.feedback,
                    },
                }
            )
        )
        return 0
    finally:
        await container.shutdown_resources()  # type: ignore[misc]


def cmd_retention(args: argparse.Namespace) -> int:
    return asyncio.run(_retention(_settings(), args))


# -- export ------------------------------------------------------------------------------


def _thread_id(key: str, tenant_id: str, user_id: str, scope: str) -> str | None:
    """The caller's thread id of a storage key (``None``: not this user's key)."""
    prefix = f"{tenant_id}:{user_id}:" if scope == "user" else f"{tenant_id}:"
    return key.removeprefix(prefix) if key.startswith(prefix) else None


async def _user_thread_keys(service: Any, tenant_id: str, user_id: str) -> set[str]:
    """Every thread the user has in the tenant, from whatever records it on this profile:
    run records (all), checkpoint metadata (embedded, postgres), the archive (redis-mysql) —
    the same sources erasure deletes from."""
    keys: set[str] = set()
    for source, method in (
        (service.backend.runs, "user_threads"),
        (service.retention, "user_thread_keys"),
        (service.archive, "user_threads"),
    ):
        if source is not None and hasattr(source, method):
            keys.update(await getattr(source, method)(tenant_id, user_id))
    return keys


async def _user_feedback(service: Any, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
    """The user's feedback rows (every profile keeps them in ``SqlRunRecords``' table)."""
    from sqlalchemy import select

    from threadkeeper.adapters.sql import SqlRunRecords, feedback

    runs = service.backend.runs
    if not isinstance(runs, SqlRunRecords):
        return []
    query = (
        select(feedback)
        .where(feedback.c.tenant_id == tenant_id, feedback.c.user_id == user_id)
        .order_by(feedback.c.at, feedback.c.run_id)
    )
    async with runs.engine.connect() as conn:
        rows = (await conn.execute(query)).mappings().all()
    return [
        {
            "thread_key": row["thread_key"],
            "run_id": row["run_id"],
            "score": row["score"],
            "comment": row["comment"],
            "at": row["at"],
        }
        for row in rows
    ]


async def _export(settings: Settings, caller: Any) -> dict[str, Any]:
    """Everything kept about ``caller``'s user in the tenant, read through the same service
    the HTTP API uses (bodies shaped as its responses)."""
    from threadkeeper.app.container import make_container
    from threadkeeper.app.http.routes import memory_out, message_out
    from threadkeeper.domain.errors import UnknownThread
    from threadkeeper.domain.transcript import MAX_PAGE, TranscriptMessage

    container = make_container(settings)
    _open_beside_a_server(container, settings)
    try:
        # only the selected profile's backend is opened (Selector), when first asked for
        service = await container.service()  # type: ignore[misc]
        ids = (caller.tenant_id, caller.user_id, settings.thread_scope)
        threads: list[dict[str, Any]] = []
        keys = await _user_thread_keys(service, caller.tenant_id, caller.user_id)
        for thread_id in sorted(t for k in keys if (t := _thread_id(k, *ids))):
            # the transcript exactly as GET /v1/threads/{thread_id}/messages serves it
            messages: list[TranscriptMessage] = []
            before: str | None = None
            while True:
                try:
                    page = await service.messages(caller, thread_id, limit=MAX_PAGE, before=before)
                except UnknownThread:
                    break  # run records or feedback only: listed, with no messages
                messages[:0] = page.messages
                if page.next_before is None:
                    break
                before = page.next_before
            threads.append({"thread_id": thread_id, "messages": [message_out(m) for m in messages]})
        feedback = [
            {"thread_id": _thread_id(key, *ids) or key, **item}
            for item in await _user_feedback(service, caller.tenant_id, caller.user_id)
            if (key := item.pop("thread_key"))
        ]
        return {
            "tenant_id": caller.tenant_id,
            "user_id": caller.user_id,
            "exported_at": datetime.now(UTC),
            "profile": settings.profile,
            "thread_scope": settings.thread_scope,
            "threads": threads,
            "memory": memory_out(await service.memory(caller)),
            "feedback": feedback,
        }
    finally:
        await container.shutdown_resources()  # type: ignore[misc]


def cmd_export(args: argparse.Namespace) -> int:
    import msgspec

    from threadkeeper.app.service import Caller
    from threadkeeper.domain.threads import TENANT_OR_USER_ID

    for name, value in (("--tenant", args.tenant), ("--user", args.user)):
        if not TENANT_OR_USER_ID.fullmatch(value):
            print(f"threadkeeper: {name} must match {TENANT_OR_USER_ID.pattern}", file=sys.stderr)
            return 2
    document = msgspec.to_builtins(
        asyncio.run(_export(_settings(), Caller(args.tenant, args.user)))
    )
    text = json.dumps(document, ensure_ascii=False, indent=2) + "\n"
    if args.output in (None, "-"):
        sys.stdout.write(text)
        return 0
    Path(args.output).write_text(text, encoding="utf-8")
    threads, memory = document["threads"], document["memory"]
    print(
        f"threadkeeper: exported {len(threads)} threads, "
        f"{sum(len(t['messages']) for t in threads)} messages, "
        f"{len(memory['profile']) + len(memory['facts'])} memory items and "
        f"{len(document['feedback'])} feedback of user {args.user} to {args.output}",
        file=sys.stderr,
    )
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    settings = _settings()
    if settings.profile == "embedded":
        print("embedded profile: nothing to migrate (its tables are set up at start)")
        return 0
    if settings.profile == "postgres":
        from threadkeeper.adapters.postgres import migrate_postgres

        for step in asyncio.run(migrate_postgres(settings.postgres_url)):
            print(step)
        return 0
    from threadkeeper.adapters.redis_mysql import migrate_redis_mysql

    for step in asyncio.run(migrate_redis_mysql(settings.mysql_url)):
        print(step)
    return 0


async def _doctor(settings: Settings) -> int:
    from threadkeeper.app.container import make_container

    print(describe(settings))
    container = make_container(settings)
    _open_beside_a_server(container, settings)
    ok = True
    try:
        # only the selected profile's backend is opened (Selector), when first asked for
        service = await container.service()  # type: ignore[misc]
        for name, state in (await service.ready()).items():
            print(f"{name}: {state}")
            ok = ok and state == "ok"
        print(f"tokenizer {service.counter.name}: ok")
        tenants = ", ".join(container.knowledge().tenants())
        print(f"knowledge base tenants: {tenants}")
    except Exception as exc:  # doctor reports whatever fails
        print(f"error: {type(exc).__name__}: {exc}")
        ok = False
    finally:
        await container.shutdown_resources()  # type: ignore[misc]
    return 0 if ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    return asyncio.run(_doctor(_settings()))


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="threadkeeper", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(func=cmd_serve)

    chat = commands.add_parser("chat", help="talk to a running service in the terminal")
    chat.add_argument("--url", default=DEFAULT_URL)
    chat.add_argument("--thread")
    chat.add_argument("--tenant", default="demo")
    chat.add_argument("--user", default="demo-user")
    chat.set_defaults(func=cmd_chat)

    tokens = commands.add_parser("tokens", help="count tokens, one stdin line per message")
    tokens.add_argument("--counter", help="o200k_base, cl100k_base, estimate or tokenizer.json")
    tokens.set_defaults(func=cmd_tokens)

    replay = commands.add_parser("replay", help="print exactly what the model saw in a run")
    replay.add_argument("--thread", required=True)
    replay.add_argument("--run", required=True)
    replay.add_argument("--tenant", default="demo")
    replay.add_argument("--user", default="demo-user")
    replay.set_defaults(func=cmd_replay)

    migrate = commands.add_parser("migrate", help="create or upgrade the schema")
    migrate.set_defaults(func=cmd_migrate)

    retention = commands.add_parser("retention", help="delete threads idle past the window")
    retention.add_argument("--older-than", help="e.g. 90d, 12h (default: RETENTION_DAYS)")
    retention.add_argument("--dry-run", action="store_true")
    retention.add_argument("--batch", type=int, default=500)
    retention.set_defaults(func=cmd_retention)

    export = commands.add_parser(
        "export",
        help="write everything kept about one user as JSON (threads, memory, feedback)",
        description="Everything threadkeeper keeps about one user in one tenant, as JSON: "
        "their threads with the messages as GET /v1/threads/{id}/messages serves them, their "
        "memory with provenance, their feedback. Works beside a running server.",
    )
    export.add_argument("--tenant", required=True)
    export.add_argument("--user", required=True)
    export.add_argument("--output", help="a file to write (default: standard output)")
    export.set_defaults(func=cmd_export)

    doctor = commands.add_parser("doctor", help="check configuration and backends")
    doctor.set_defaults(func=cmd_doctor)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"threadkeeper: configuration error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
