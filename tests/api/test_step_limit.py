"""A run that keeps calling tools ends at its step limit: with ``compact`` and a budget too
small to show the tool result the model asked for, the model asked again and again — the run
made model calls until LangGraph's default recursion limit (~10,000 steps; a paid call each
with a real model) before failing."""

from __future__ import annotations

from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from tests.api.conftest import AppFactory
from tests.support import tracing
from threadkeeper.app.runs.execute import MAX_MODEL_CALLS


@pytest.mark.integration
@pytest.mark.parametrize("profile", ["redis-mysql"])
async def test_a_run_that_keeps_calling_tools_stops_at_its_step_limit(
    make_app: AppFactory, auth: dict[str, str], database: Any, profile: str
) -> None:
    exporter = tracing.install()
    exporter.clear()
    app = make_app(hooks="truncate_tool_results,summarize,compact", token_budget=900)
    async with AsyncTestClient(app, timeout=120) as client:
        client.headers.update(auth)
        response = await client.post(
            "/v1/threads/looping/runs",
            json={"message": {"content": "Please give me the full details of the dental cover"}},
            headers={"Accept": "application/json"},
        )
        assert response.status_code == 500, response.text
        assert response.json()["type"].endswith(":run-failed")
        page = await client.get("/v1/threads/looping/messages")
        assert page.status_code == 404, "nothing of the failed run was stored"
    calls = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert 1 < len(calls) <= MAX_MODEL_CALLS
