"""What the HTTP layer needs to know that is not the service: tokens, debug, lifespan hooks."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from litestar.types import LifespanHook

if TYPE_CHECKING:
    from threadkeeper.app.http.ratelimit import RunRateLimit

ANY_TENANT = "*"
"""In ``HttpSettings.service_tokens``, a tenant list containing this allows every tenant."""


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """Settings of the HTTP API (see ``create_http_app``).

    ``service_token`` is allowed for every tenant; ``service_tokens`` maps further tokens to the
    tenants they may act for (``"*"`` = any). Tokens are required on ``/v1`` when
    ``require_token`` is set (every profile but ``embedded``) or as soon as one is configured.
    """

    service_token: str | None = None
    service_tokens: Mapping[str, Sequence[str]] = field(default_factory=dict)
    require_token: bool = True
    debug: bool = False
    on_startup: Sequence[LifespanHook] = ()
    on_shutdown: Sequence[LifespanHook] = ()
    lifespan: Sequence[Callable[[Any], AbstractAsyncContextManager[Any]]] = ()
    """Async context managers entered at start-up, exited at shutdown (e.g. DI resources);
    each is called with the ``Litestar`` app."""
    openapi_title: str = "threadkeeper"
    openapi_version: str = "0.1.0"
    max_body_bytes: int = 1024 * 1024
    """Whole request bodies over this are refused with 413 before they are parsed."""
    run_rate_limit: RunRateLimit | None = None
    """Runs per (tenant, user) per minute (``POST …/runs`` over it → 429); ``None``: off."""
    sse_heartbeat_seconds: float = 15.0
    """A keep-alive comment on a run's SSE stream after this long without an event."""
    body_timeout_seconds: float = 10.0
    """A request's whole body within this long of its arrival, or 408 and the connection
    closed (``http.body_deadline``)."""

    def __post_init__(self) -> None:
        if self.require_token and not self.tokens():
            raise ValueError(
                "a service token is required: set THREADKEEPER_SERVICE_TOKEN "
                "(or THREADKEEPER_SERVICE_TOKENS)"
            )
        for tenants in self.service_tokens.values():
            if isinstance(tenants, str):
                raise ValueError(f"tenants of a service token must be a list, not {tenants!r}")
        if any(not token for token in self.tokens()):
            raise ValueError("a service token must not be empty")

    def tokens(self) -> dict[str, tuple[str, ...]]:
        """Every accepted token with the tenants it may act for."""
        tokens = {token: tuple(tenants) for token, tenants in self.service_tokens.items()}
        if self.service_token is not None:
            tokens[self.service_token] = (ANY_TENANT,)
        return tokens

    @property
    def auth_enabled(self) -> bool:
        return self.require_token or bool(self.tokens())
