"""The service-token guard of ``/v1``: ``Authorization: Bearer <token>`` (401), and a token
limited to some tenants may act only for those (403)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import Guard

from threadkeeper.app.http.problems import http_problem
from threadkeeper.app.http.schemas import ID_PATTERN, TENANT_HEADER, exact
from threadkeeper.app.http.settings import ANY_TENANT

BEARER_SCHEME = "serviceToken"


class TokenTable:
    """Accepted tokens and their tenants; lookups compare every token in constant time."""

    def __init__(self, tokens: Mapping[str, Sequence[str]]) -> None:
        self._tokens = [(token.encode(), frozenset(tenants)) for token, tenants in tokens.items()]

    def tenants_of(self, presented: str) -> frozenset[str] | None:
        """The tenants ``presented`` may act for; ``None`` when it is not a token."""
        candidate = presented.encode()
        found: frozenset[str] | None = None
        for token, tenants in self._tokens:
            # No early exit: the time taken does not tell which token (or prefix) matched.
            if hmac.compare_digest(token, candidate):
                found = tenants
        return found


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def service_token_guard(table: TokenTable) -> Guard:
    """A guard answering 401 without a valid token, 403 for a tenant the token may not use.

    A missing or malformed ``X-Tenant-Id`` is left to validation (422).
    """

    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        token = bearer_token(connection.headers.get("authorization"))
        tenants = table.tenants_of(token) if token is not None else None
        if tenants is None:
            raise http_problem(
                401,
                "A valid service token is required: Authorization: Bearer <token>.",
                headers={"WWW-Authenticate": 'Bearer realm="threadkeeper"'},
            )
        tenant = connection.headers.get(TENANT_HEADER)
        if ANY_TENANT in tenants or tenant is None or not exact(ID_PATTERN, tenant):
            return
        if tenant not in tenants:
            raise http_problem(403, "This service token may not act for this tenant.")

    return guard
