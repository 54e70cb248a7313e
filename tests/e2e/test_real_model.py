"""A real server process with an OpenAI-compatible provider on loopback (the fake provider,
real HTTP): what the model is sent and what a run reports of it.

Issue 10: usage was 0/0 on every run through an OpenAI-compatible endpoint (streaming
requests never asked for it). A run now reports the provider's figures when it gives them
(``usage.source == "provider"``) and otherwise threadkeeper's count with the configured
tokenizer (``"counted"``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.fake_openai import FakeProvider, fake_provider
from tests.support.servers import ProfileServer, profile_server

DENTAL = "Is dental treatment covered by my health insurance?"


def model_env(provider: FakeProvider) -> dict[str, str]:
    return {
        "THREADKEEPER_MODEL": "openai:fake-model",
        "OPENAI_BASE_URL": provider.url,
        "OPENAI_API_KEY": "test-key",
    }


@pytest.fixture(params=[True, False], ids=["provider-reports-usage", "provider-reports-none"])
def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[ProfileServer, FakeProvider]]:
    with (
        fake_provider(reports_usage=bool(request.param)) as provider,
        profile_server("embedded", tmp_path, **model_env(provider)) as server,
    ):
        yield server, provider


def test_usage_comes_from_the_provider_or_is_counted(
    served: tuple[ProfileServer, FakeProvider],
) -> None:
    server, provider = served
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=60) as client:
        response = client.post(
            "/v1/threads/usage/runs",
            json={"message": {"content": DENTAL}},
            headers={"Accept": "application/json"},
        )
    assert response.status_code == 200, response.text
    usage = response.json()["usage"]
    streamed = [r for r in provider.requests if r.get("stream") is True]
    assert streamed, "the answer was streamed"
    assert streamed[0].get("stream_options") == {"include_usage": True}, "usage was asked for"
    assert usage["input_tokens"] > 0
    assert usage["output_tokens"] > 0
    if provider.reports_usage:
        assert usage["source"] == "provider"
        assert usage["output_tokens"] == len(response.json()["message"]["content"].split())
    else:
        assert usage["source"] == "counted"
