"""``threadkeeper migrate`` and ``threadkeeper doctor``."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from threadkeeper.app.cli.common import _one_line, _run_on_storage, _settings
from threadkeeper.app.config import (
    Settings,
    describe,
    redact,
    secrets_of,
)

if TYPE_CHECKING:
    from threadkeeper.domain.followups import FollowUpCounts


def cmd_migrate(args: argparse.Namespace) -> int:
    from threadkeeper.app.storage import migrate, schema_server

    settings = _settings()
    if schema_server(settings) is None:
        print(f"{settings.profile} profile: nothing to migrate (its tables are set up at start)")
        return 0
    steps = _run_on_storage(settings, migrate(settings))
    for step in steps:
        print(step)
    return 0


# -- doctor ------------------------------------------------------------------------------


def followup_line(counts: FollowUpCounts, now: datetime | None = None) -> str:
    """``doctor``'s line on follow-up work: what is pending by kind, the oldest's age, what
    was given up (the workers of ``serve`` do the work; none pending is the normal state)."""
    pending = sum(counts.pending.values())
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(counts.pending.items()))
    line = f"follow-up work: {pending} pending" + (f" ({kinds})" if kinds else "")
    if counts.oldest is not None:
        age = ((now or datetime.now(UTC)) - counts.oldest).total_seconds()
        line += f", oldest {max(0.0, age):.0f} s"
    given_up = sum(counts.given_up.values())
    return line + f", {given_up} given up"


async def _doctor(settings: Settings) -> int:
    """Each check on its own line; building only what a check needs."""
    print(describe(settings))
    ok = True

    def failed(what: str, exc: BaseException) -> None:
        nonlocal ok
        ok = False
        print(f"{what}: error: {type(exc).__name__}: {_one_line(exc, settings)}")

    from threadkeeper.app.storage import open_stored

    try:
        async with open_stored(settings) as stored:
            for name, state in (await stored.ready()).items():
                print(f"{name}: {redact(state, secrets_of(settings))}")
                ok = ok and state == "ok"
            print(followup_line(await stored.backend.followups.counts()))
    except Exception as exc:  # doctor reports whatever fails
        failed(f"{settings.profile} storage", exc)
    counter = None
    try:
        from threadkeeper.app.counters import counter_from_name

        counter = counter_from_name(settings.tokenizer)
        print(f"tokenizer {counter.name}: ok")
    except Exception as exc:
        failed(f"tokenizer {settings.tokenizer}", exc)
    try:
        from threadkeeper.adapters.knowledge import KnowledgeBase

        tenants = ", ".join(KnowledgeBase.from_directory().tenants())
        print(f"knowledge base tenants: {tenants}")
    except Exception as exc:
        failed("knowledge base", exc)
    models: list[tuple[str, str | None]] = [
        ("MODEL", settings.model),
        ("MODEL_FALLBACK", settings.model_fallback),
    ]
    for variable, model_name in models:
        if model_name is None:
            continue
        if model_name == "builtin":  # nothing to check (and nothing worth importing)
            print(f"model {model_name}: ok")
            continue
        try:
            from threadkeeper.app.container import build_model

            build_model(model_name, 0.0, settings.model_timeout_seconds, variable=variable)
            print(f"model {model_name}: ok (not called)")
        except Exception as exc:
            failed(f"model {model_name}", exc)
    if settings.hooks is None:
        print("hooks: the profile's default")
    elif counter is not None:
        try:
            from threadkeeper.hooks import HookSettings, build_pipeline

            build_pipeline(
                settings.hooks,
                HookSettings(
                    budget=settings.token_budget,
                    counter=counter,
                    summary_after_turns=settings.summary_after_turns,
                    tool_result_max_chars=settings.tool_result_max_chars,
                ),
                allow_destructive=not settings.history_in_checkpoints,
            )
            print(f"hooks {settings.hooks}: ok")
        except Exception as exc:
            failed(f"hooks {settings.hooks}", exc)
    return 0 if ok else 1


def cmd_doctor(args: argparse.Namespace) -> int:
    return asyncio.run(_doctor(_settings()))
