"""Model calls that cannot hang a thread: a deadline per call, retries, a fallback model.

A provider that stops answering held a thread for minutes (``init_chat_model`` sets no
timeout; the openai client waits 600 s per try, three tries, and its timeout bounds only the
gap between chunks of a stream). So every model call runs through, outermost first:

- ``ModelFailureBoundary`` — whatever the model calls below it raise in the end is one
  ``ModelUnavailable`` (HTTP 502 ``model-unavailable``, the thread unchanged);
- LangChain's ``ModelFallbackMiddleware`` (``THREADKEEPER_MODEL_FALLBACK``), when configured;
- LangChain's ``ModelRetryMiddleware`` (``THREADKEEPER_MODEL_MAX_RETRIES``) with
  ``on_failure="error"`` — its default, ``"continue"``, would answer with the error text and
  store it as the answer;
- ``ModelCallDeadline`` (``THREADKEEPER_MODEL_TIMEOUT_SECONDS``): one call, its whole stream
  included. An attempt that follows a failed one (a retry, or the fallback) is announced on
  the stream as it starts (``custom`` ``{"stage": "model", "status": "retry"}``): the deltas
  streamed so far belong to an answer that will not be kept. The last failed attempt is not
  announced: no attempt follows it, and the run ends with its error.

The provider client's own retries are off (``max_retries=0``): retrying is done once, here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from typing import Any

from langchain.agents.middleware import (
    AgentMiddleware,
    ModelFallbackMiddleware,
    ModelRequest,
    ModelResponse,
    ModelRetryMiddleware,
)
from langchain_core.language_models import BaseChatModel
from langgraph.config import get_stream_writer
from langgraph.errors import GraphBubbleUp

from threadkeeper.domain.errors import DomainError, ModelUnavailable

log = logging.getLogger(__name__)

RETRY_INITIAL_DELAY_SECONDS = 0.5


class ModelTimeout(TimeoutError):
    """One model call took longer than ``THREADKEEPER_MODEL_TIMEOUT_SECONDS``."""


Handler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]


class ModelCallDeadline(AgentMiddleware[Any, Any]):
    """One model call, its whole stream included, within ``seconds``."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    @property
    def name(self) -> str:
        return "model_call_deadline"

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Handler
    ) -> ModelResponse[Any]:
        attempts = _ATTEMPTS.get()
        if attempts is not None:
            if attempts.failed is not None:  # another attempt after a failed one: say so
                _announce_retry(attempts.failed)
            attempts.failed = None
        try:
            async with asyncio.timeout(self.seconds):
                return await handler(request)
        except GraphBubbleUp:
            raise
        except Exception as exc:
            if isinstance(exc, TimeoutError):
                exc = ModelTimeout(f"the model call took longer than {self.seconds:g} s")
            log.warning("a model call failed: %s%s", type(exc).__name__, provider_status(exc))
            if attempts is not None:
                attempts.failed = type(exc).__name__
            raise exc from None


def provider_status(exc: BaseException) -> str:
    """`` (HTTP 503)`` when the provider answered the call with an HTTP error status (the
    OpenAI client's ``APIStatusError``, httpx's ``HTTPStatusError``); otherwise nothing. Only
    the status: a provider's error body can quote the request."""
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        status = getattr(getattr(exc, "response", None), "status_code", None)
    return f" (HTTP {status})" if isinstance(status, int) else ""


class _Attempts:
    """One model call's attempts (its retries and fallback): the last one's failure, until
    the next attempt starts."""

    __slots__ = ("failed",)

    def __init__(self) -> None:
        self.failed: str | None = None


_ATTEMPTS: ContextVar[_Attempts | None] = ContextVar("threadkeeper_model_attempts", default=None)
"""Set by ``ModelFailureBoundary`` around one model call: the retry is announced when the
next attempt (a retry, or the fallback) starts — never after the last one, which no attempt
follows (issue 27: it was, even with ``THREADKEEPER_MODEL_MAX_RETRIES=0``)."""


def _announce_retry(error: str) -> None:
    try:
        write = get_stream_writer()
    except Exception:  # outside a graph run (tests calling the middleware directly)
        return
    write({"stage": "model", "status": "retry", "error": error})


class ModelFailureBoundary(AgentMiddleware[Any, Any]):
    """The model calls' final failure as ``ModelUnavailable`` (type names only: provider
    errors can quote the request)."""

    @property
    def name(self) -> str:
        return "model_failure_boundary"

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: Handler
    ) -> ModelResponse[Any]:
        token = _ATTEMPTS.set(_Attempts())
        try:
            return await handler(request)
        except (GraphBubbleUp, DomainError):
            raise
        except Exception as exc:
            raise ModelUnavailable(
                f"the model did not answer ({type(exc).__name__}); nothing was stored"
            ) from exc
        finally:
            _ATTEMPTS.reset(token)


def model_call_middleware(
    *, timeout_seconds: float, max_retries: int, fallback: BaseChatModel | None
) -> Sequence[AgentMiddleware[Any, Any]]:
    """The middleware around every model call, outermost first (see the module docstring)."""
    chain: list[AgentMiddleware[Any, Any]] = [ModelFailureBoundary()]
    if fallback is not None:
        chain.append(ModelFallbackMiddleware(fallback))
    if max_retries > 0:
        chain.append(
            ModelRetryMiddleware(
                max_retries=max_retries,
                on_failure="error",
                initial_delay=RETRY_INITIAL_DELAY_SECONDS,
            )
        )
    chain.append(ModelCallDeadline(timeout_seconds))
    return chain
