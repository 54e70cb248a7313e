"""A turn's CPU with a real provider's client, apart: the run, then its follow-up work.

In process, no HTTP server: the run service of a profile (``embedded`` on a fresh data
directory, ``postgres`` on a fresh schema of the test server) whose model is the fake
OpenAI-compatible provider (``tests/support/fake_openai.py``, no delay; it answers the memory
extraction with one fact) through LangChain's ``ChatOpenAI`` — the client a backend with a paid
OpenAI-compatible model runs — with memory and the rolling summary on as the follow-up latency
benchmark sets them (budget 1,500 tokens, summary after 4 turns, 8 facts). One thread of
``--turns`` turns after 5 warm-up turns; for each, the CPU of the run (until its
acknowledgement) and then of what follows it (the thread's weighing and the follow-up work,
done here: ``RunService.wait_idle``). The provider runs in a thread of this process, so its
CPU (≈ 1 ms a call) is counted too, in both parts. Tracing is off.

Reproduce the figures in docs/benchmarks.md ("A turn's CPU with a real provider's client")::

    .venv/bin/python benchmarks/turn_cpu.py embedded --turns 60
    .venv/bin/python benchmarks/turn_cpu.py embedded --turns 60 --no-summary
    .venv/bin/python benchmarks/turn_cpu.py embedded --turns 60 --sdk-transform   # before
    .venv/bin/python benchmarks/turn_cpu.py postgres --turns 60
    uv tool run py-spy record --gil -r 400 -f raw -o docs/benchmarks/profile-turn-cpu.txt -- \\
        .venv/bin/python benchmarks/turn_cpu.py embedded --turns 150
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.fake_openai import FakeProvider, default_answer
from threadkeeper.adapters.knowledge import KnowledgeBase
from threadkeeper.adapters.openai_requests import UntransformedCompletions
from threadkeeper.app.config import Settings
from threadkeeper.app.container import build_model, build_service
from threadkeeper.app.counters import counter_from_name
from threadkeeper.app.memory import EXTRACTION_PROMPT
from threadkeeper.app.service import Caller, RunMessage, RunRequest
from threadkeeper.app.storage import open_backend

PRODUCTS = ("travel insurance", "home insurance", "car insurance", "dental cover", "life cover")
QUESTIONS = (
    "I would like to know what my policy includes for lost luggage and delayed flights.",
    "Does my home insurance cover water damage from a burst pipe in winter?",
    "How do I add my teenage son as a driver to my car insurance policy?",
)
WARM = 5


def answer(body: dict[str, Any]) -> str:
    """The fake provider's answers: one fact for a memory extraction, else its default."""
    messages = body.get("messages") or []
    system = "".join(
        m.get("content") or ""
        for m in messages
        if m.get("role") in ("system", "developer") and isinstance(m.get("content"), str)
    )
    if system.startswith(EXTRACTION_PROMPT[:60]):
        n = len(messages)
        return json.dumps(
            [{"kind": "facts", "key": f"product:p{n % 7}", "value": PRODUCTS[n % len(PRODUCTS)]}]
        )
    return default_answer(body)


async def measure(
    profile: str,
    turns: int,
    summary: bool,
    sdk_transform: bool = False,
    postgres_url: str | None = None,
) -> tuple[float, float]:
    """(the run's CPU, its follow-up work's CPU) per turn, in ms."""
    with contextlib.ExitStack() as stack:
        provider = stack.enter_context(FakeProvider())
        provider.answer = answer
        os.environ.update(OPENAI_API_KEY="turn-cpu", OPENAI_BASE_URL=provider.url)
        extra: dict[str, Any] = {}
        if profile == "postgres":
            extra = {"postgres_url": postgres_url, "service_token": "t"}
        if not summary:
            extra["hooks"] = "truncate_tool_results,trim"
        settings = Settings.of(
            profile=profile,
            data_dir=f"{tempfile.mkdtemp(prefix='tk-turn-cpu-')}/data",
            model="openai:fake-model",
            token_budget=1500,
            summary_after_turns=4,
            memory_max_facts=8,
            **extra,
        )
        async with open_backend(settings) as backend:
            model = build_model(settings.model, 0, settings.model_timeout_seconds)
            if sdk_transform and isinstance(model.async_client, UntransformedCompletions):
                model.async_client = model.async_client._inner  # the SDK's own path (before)
            service = build_service(
                settings=settings,
                backend=backend,
                counter=counter_from_name(settings.tokenizer),
                knowledge=KnowledgeBase.from_directory(),
                model=model,
            )
            caller = Caller(tenant_id="acme", user_id="turn-cpu")
            run_cpu = follow_up_cpu = 0.0
            for turn in range(WARM + turns):
                started = time.process_time()
                message = RunMessage(f"{QUESTIONS[turn % len(QUESTIONS)]} ({turn})")
                handle = await service.start_run(caller, "turn-cpu", RunRequest(message))
                assert (await handle.result()).status == "answered"
                ran = time.process_time()
                await service.wait_idle()  # the thread's weighing, then the follow-up work
                followed = time.process_time()
                if turn >= WARM:
                    run_cpu += ran - started
                    follow_up_cpu += followed - ran
    return run_cpu / turns * 1e3, follow_up_cpu / turns * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", choices=("embedded", "postgres"))
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--no-summary", action="store_true", help="trim only: no summary folds")
    parser.add_argument(
        "--sdk-transform",
        action="store_true",
        help="the OpenAI SDK's own request transform (before adapters.openai_requests)",
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = None
        if args.profile == "postgres":  # migrated on its own loop, before this one starts
            from tests.support.postgres import fresh_schema

            url = stack.enter_context(fresh_schema())
        run_ms, follow_up_ms = asyncio.run(
            measure(args.profile, args.turns, not args.no_summary, args.sdk_transform, url)
        )
    print(
        f"{args.profile}{' (no summary)' if args.no_summary else ''}"
        f"{' (SDK transform)' if args.sdk_transform else ''}: run {run_ms:.1f} ms, "
        f"follow-up work {follow_up_ms:.1f} ms of CPU per turn ({args.turns} turns)"
    )


if __name__ == "__main__":
    main()
