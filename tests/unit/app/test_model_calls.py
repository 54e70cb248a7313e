"""The model-call middleware announces a retry only when another attempt follows (issue 27:
the ``custom`` ``{"stage": "model", "status": "retry"}`` event was also sent after the last
failed attempt, even with ``THREADKEEPER_MODEL_MAX_RETRIES=0``)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult

from threadkeeper.app import model_calls
from threadkeeper.app.model_calls import model_call_middleware


class Flaky(GenericFakeChatModel):
    """Fails its first ``failures`` calls, then answers."""

    failures: int = 0
    calls: int = 0

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("the provider went away")
        return await super()._agenerate(messages, *args, **kwargs)


async def announced(failures: int, retries: int, fallback: bool = False) -> list[dict[str, Any]]:
    model = Flaky(messages=iter([AIMessage("answer")]), failures=failures)
    backup = GenericFakeChatModel(messages=iter([AIMessage("fallback answer")]))
    agent = create_agent(
        model,
        middleware=model_call_middleware(
            timeout_seconds=5, max_retries=retries, fallback=backup if fallback else None
        ),
    )
    events: list[dict[str, Any]] = []
    try:
        async for mode, chunk in agent.astream(
            {"messages": [HumanMessage("hi")]}, stream_mode=["custom", "values"]
        ):
            if mode == "custom":
                events.append(chunk)
    except Exception:  # the run's failure: what matters is what was announced before it
        pass
    return [e for e in events if e.get("stage") == "model"]


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model_calls, "RETRY_INITIAL_DELAY_SECONDS", 0.0)


async def test_no_retry_is_announced_when_none_follows() -> None:
    assert await announced(failures=1, retries=0) == []


async def test_a_retry_is_announced_once_per_attempt_that_follows() -> None:
    events = await announced(failures=1, retries=1)
    assert [e["status"] for e in events] == ["retry"]
    assert events[0]["error"] == "ConnectionError"


async def test_the_last_failed_attempt_is_not_announced_as_a_retry() -> None:
    events = await announced(failures=5, retries=2)
    assert [e["status"] for e in events] == ["retry", "retry"]  # 3 attempts: 2 followed one


async def test_a_fallback_after_the_last_attempt_is_announced() -> None:
    events = await announced(failures=5, retries=0, fallback=True)
    assert [e["status"] for e in events] == ["retry"]


async def test_a_failure_log_names_the_providers_http_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Model-failure logs named only the exception type (issue 27): the provider's HTTP status
    is what tells a rate limit from an outage."""
    import httpx
    import openai

    class Refused(Flaky):
        async def _agenerate(self, *args: Any, **kwargs: Any) -> ChatResult:
            request = httpx.Request("POST", "http://provider/v1/chat/completions")
            response = httpx.Response(429, request=request, json={"error": "slow down"})
            raise openai.RateLimitError("slow down", response=response, body=None)

    agent = create_agent(
        Refused(messages=iter([])),
        middleware=model_call_middleware(timeout_seconds=5, max_retries=0, fallback=None),
    )
    from threadkeeper.domain.errors import ModelUnavailable

    with caplog.at_level(logging.WARNING, logger="threadkeeper"), pytest.raises(ModelUnavailable):
        await agent.ainvoke({"messages": [HumanMessage("hi")]})
    assert "a model call failed: RateLimitError (HTTP 429)" in caplog.text
    assert "slow down" not in caplog.text
