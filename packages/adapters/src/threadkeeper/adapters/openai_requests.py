"""OpenAI chat-completions requests whose ``messages`` skip the SDK's request-body transform.

The OpenAI SDK walks every request's parameters against their ``TypedDict`` annotations before
sending them (``openai._utils._transform``); for ``messages``, a union of six message types, it
transforms each message against every member of the union. For chat messages that walk changes
nothing (no key aliases, no dates, no files): it only costs CPU — 17 % of the process's CPU in a
turn with memory extraction and summary folds against the fake provider (the in-process profile
in docs/benchmarks.md), the largest single item. The SDK's ``extra_body`` is merged into the JSON
body as given, after the transform, so the messages are sent there, beside an empty
``messages`` placeholder that the merge replaces: the request on the wire is the same
(``tests/unit/adapters/test_openai_requests.py`` compares the bodies the provider received). The
same walk and this workaround are discussed upstream for the SDKs generated alike
(anthropics/anthropic-sdk-python#1195).

``send_messages_as_given`` wraps a LangChain ``ChatOpenAI``'s async client (``create`` and
``with_raw_response.create``, the two calls it makes); any other model is returned unchanged.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

Model = TypeVar("Model")


def untransformed(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` of ``chat.completions.create`` with the messages moved into ``extra_body``
    (unchanged when there are none, or ``extra_body`` already names them)."""
    messages = params.get("messages")
    extra = params.get("extra_body") or {}
    if messages is None or "messages" in extra:
        return dict(params)
    return {**params, "messages": [], "extra_body": {**extra, "messages": list(messages)}}


class _Creating:
    """``with_raw_response`` of the wrapped client: its ``create``, the messages as given."""

    def __init__(self, create: Callable[..., Awaitable[Any]]) -> None:
        self._create = create

    async def create(self, **params: Any) -> Any:
        return await self._create(**untransformed(params))


class UntransformedCompletions:
    """An ``AsyncCompletions`` that sends ``messages`` as given (see the module docstring);
    everything else is the wrapped client's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def create(self, **params: Any) -> Any:
        return await self._inner.create(**untransformed(params))

    @property
    def with_raw_response(self) -> _Creating:
        return _Creating(self._inner.with_raw_response.create)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def send_messages_as_given(model: Model) -> Model:
    """``model`` with its OpenAI async chat-completions client wrapped
    (``UntransformedCompletions``), when it has one; else ``model`` unchanged."""
    try:
        from openai.resources.chat.completions import AsyncCompletions
    except ImportError:  # the openai extra is not installed: no model uses its client
        return model
    client = getattr(model, "async_client", None)
    if isinstance(client, AsyncCompletions):
        model.async_client = UntransformedCompletions(client)  # type: ignore[attr-defined]
    return model
