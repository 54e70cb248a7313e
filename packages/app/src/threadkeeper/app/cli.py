"""``threadkeeper`` — serve, chat, tokens, replay, migrate, retention, doctor."""

from __future__ import annotations

import argparse
import asyncio
import json
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
    import uvicorn

    from threadkeeper.adapters.embedded import DataDirBusy, DataDirLock
    from threadkeeper.app.application import create_app

    settings = _settings()
    if settings.profile == "embedded":
        probe = DataDirLock(Path(settings.data_dir).resolve())
        try:
            probe.acquire()
        except DataDirBusy as exc:
            print(f"threadkeeper: {exc}", file=sys.stderr)
            return 2
        probe.release()
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
        app = create_app(settings)
    except ConfigError as exc:
        print(f"threadkeeper: configuration error: {exc}", file=sys.stderr)
        return 2
    print(
        f"threadkeeper {settings.profile} profile on http://{args.host}:{args.port} "
        f"(data: {_storage(settings)})",
        file=sys.stderr,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, lifespan="on")
    return 0


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
    _read_beside_a_server(container, settings)
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
        for index, call in enumerate(record.model_calls):
            system = record.system_prompt
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


def _read_beside_a_server(container: Any, settings: Settings) -> None:
    """Open the embedded backend without its data-dir lock (reading beside a running
    server); the server profiles need no such thing."""
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
    from threadkeeper.domain.retention import parse_duration, sweep

    if args.older_than:
        older_than = parse_duration(args.older_than)
    elif settings.retention_days:
        older_than = parse_duration(f"{settings.retention_days}d")
    else:
        print(
            "threadkeeper: no retention window: pass --older-than or set "
            "THREADKEEPER_RETENTION_DAYS",
            file=sys.stderr,
        )
        return 2
    container = make_container(settings)
    # only the selected profile's backend is opened (Selector), when first asked for
    try:
        backend = await container.backend()
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
    _read_beside_a_server(container, settings)
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
