"""The Grafana dashboard (``deploy/grafana/threadkeeper.json``) asks only for what ``/metrics``
serves: after runs that exercise every panel — a streamed run, a tool call, a 409, a 429, a
summary fold, a compaction, a cold start, a memory fact and a refusal, a deletion and an
erasure — every metric its queries name is in a real ``/metrics`` of the redis-mysql profile
(the one profile where every panel has data)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.api.conftest import TENANT, AppFactory, Servers, flush, run
from tests.support.fake_openai import fake_provider
from threadkeeper.app.runs import execute

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "threadkeeper.json"
QUESTIONS = [
    "Is dental treatment covered by my health insurance?",
    "Does my policy cover physiotherapy sessions?",
    "How do I file a claim for a hospital stay?",
    "What is the waiting period for maternity cover?",
    "Can I add my spouse to my health insurance?",
    "Is emergency treatment abroad covered?",
]
PROMQL_WORDS = {
    "sum", "by", "without", "rate", "irate", "increase", "histogram_quantile", "scalar",
    "avg", "max", "min", "count", "topk", "on", "ignoring", "group_left", "label_values",
}  # fmt: skip


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return queries


def metric_names(query: str) -> set[str]:
    """The series a PromQL query selects (label matchers, grouping labels, ranges and
    numbers taken out first; of a variable's ``label_values(series, label)``, the series)."""
    values = re.fullmatch(r"\s*label_values\(\s*([A-Za-z_:][A-Za-z0-9_:]*).*\)\s*", query)
    if values:
        return {values.group(1)}
    text = re.sub(r"\{[^}]*\}", " ", query)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(?:by|without)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\"[^\"]*\"", " ", text)
    names = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    return {n for n in names if n not in PROMQL_WORDS}


def test_the_dashboard_parses_and_names_metrics() -> None:
    queries = dashboard_queries()
    assert len(queries) >= 14
    named = set().union(*(metric_names(q) for q in queries))
    assert "threadkeeper_runs_total" in named
    assert "threadkeeper_run_duration_seconds_bucket" in named
    assert all(not n.startswith("$") for n in named)


async def _hold(app: Litestar, key: str, held: threading.Event, release: threading.Event) -> None:
    service = await app.state.container.service()
    tenant, user, _ = key.split(":")
    async with service.backend.lock.hold(key, "held-by-test", tenant_id=tenant, user_id=user):
        held.set()
        await asyncio.to_thread(release.wait, 120)


@pytest.mark.integration
@pytest.mark.parametrize("profile", ["redis-mysql"])
async def test_every_metric_the_dashboard_names_is_served(
    make_app: AppFactory,
    auth: dict[str, str],
    database: Servers | None,
    profile: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert database is not None
    assert database.redis_url is not None
    monkeypatch.setattr(execute, "WEIGH_EVERY_SECONDS", 0.0)  # weigh after every round
    user = f"dash-{uuid.uuid4().hex[:8]}"
    headers = {**auth, "X-User-Id": user}
    folding = make_app(
        hooks="truncate_tool_results,summarize,compact", summary_after_turns=2, token_budget=900
    )
    async with AsyncTestClient(folding, timeout=60) as client:
        client.headers.update(headers)
        for question in QUESTIONS * 2:  # folds and compactions
            await run(client, "long", question)
        flush(database.redis_url)  # the checkpoints are gone; the archive is not
        await run(client, "long", QUESTIONS[0])  # a cold start
    with fake_provider() as provider:  # a model whose memory extraction proposes personal data
        monkeypatch.setenv("OPENAI_BASE_URL", provider.url)
        monkeypatch.setenv("OPENAI_API_KEY", "test-key")
        provider.script(
            "Dental cover pays for fillings at 80% [dental-cover.en#2].",
            json.dumps([{"kind": "profile", "key": "national_id", "value": "0499370899"}]),
        )
        async with AsyncTestClient(make_app(model="openai:fake-model"), timeout=60) as client:
            client.headers.update(headers)
            await run(client, "refused", "I am married. Are fillings covered?")
    app = make_app(rate_limit_per_minute=12)
    async with AsyncTestClient(app, timeout=60) as client:
        client.headers.update(headers)
        streamed = await client.post(
            "/v1/threads/streamed/runs",
            json={"message": {"content": QUESTIONS[0]}},
            headers={"Accept": "text/event-stream"},
        )
        assert "event: end" in streamed.text
        await run(client, "tool", "Please give me the full details of the dental cover")
        await run(client, "memory", "I am married. My national code is 0499370899; dental?")
        held, release = threading.Event(), threading.Event()
        holder = client.blocking_portal.start_task_soon(
            _hold, app, f"{TENANT}:{user}:busy", held, release
        )
        try:
            assert await asyncio.to_thread(held.wait, 60)
            busy = await client.post(
                "/v1/threads/busy/runs",
                json={"message": {"content": QUESTIONS[1]}},
                headers={"Accept": "application/json"},
            )
            assert busy.status_code == 409
        finally:
            release.set()
            await asyncio.to_thread(holder.result, 60)
        limited: Any = None
        for _ in range(20):
            limited = await client.post(
                "/v1/threads/limited/runs",
                json={"message": {"content": QUESTIONS[2]}},
                headers={"Accept": "application/json"},
            )
            if limited.status_code == 429:
                break
        assert limited is not None
        assert limited.status_code == 429
        assert (await client.delete("/v1/threads/tool")).status_code == 204
        assert (await client.delete(f"/v1/users/{user}")).status_code == 200
        exposition = (await client.get("/metrics")).text

    served = {line.split("{")[0].split(" ")[0] for line in exposition.splitlines() if line}
    served.discard("#")
    missing = {
        name: query
        for query in dashboard_queries()
        for name in metric_names(query)
        if name not in served
    }
    assert not missing, f"the dashboard asks for series /metrics does not serve: {missing}"
