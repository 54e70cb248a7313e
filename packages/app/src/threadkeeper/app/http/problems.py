"""Errors as RFC 9457 problem details: every status the API returns is ``application/problem+json``.

Domain errors map through ``service.PROBLEMS``; Litestar's validation errors become 422 with an
``errors`` list (a body that is not JSON at all stays 400); anything unexpected is a 500 that
names nothing internal.
"""

from __future__ import annotations

import logging
import re
from http import HTTPStatus
from typing import Any

import msgspec
from litestar.exceptions import HTTPException, ValidationException
from litestar.plugins.problem_details import ProblemDetailsConfig, ProblemDetailsException

from threadkeeper.app.http.schemas import (
    LOCALE_HEADER,
    NOT_BLANK_PATTERN,
    TENANT_HEADER,
    USER_HEADER,
)
from threadkeeper.app.service import (
    DuplicateMessage,
    Unavailable,
    problem_spec,
    storage_unreachable,
)
from threadkeeper.domain.errors import (
    AtCapacity,
    CommitInDoubt,
    DomainError,
    ThreadBusy,
)
from threadkeeper.domain.runs import IdempotencyMismatch

log = logging.getLogger("threadkeeper.app.http")

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "urn:threadkeeper:problem:"


def problem_type(slug: str) -> str:
    return TYPE_PREFIX + slug


def http_problem(
    status: int,
    detail: str | None = None,
    *,
    slug: str | None = None,
    title: str | None = None,
    headers: dict[str, str] | None = None,
    **extensions: Any,
) -> ProblemDetailsException:
    """A problem for ``status``: ``type`` is ``about:blank`` unless a threadkeeper ``slug``."""
    phrase = HTTPStatus(status).phrase
    return ProblemDetailsException(
        status_code=status,
        type_=problem_type(slug) if slug else "about:blank",
        title=title or phrase,
        detail=detail or phrase,
        headers=headers,
        extra={k: v for k, v in extensions.items() if v is not None} or None,
    )


def domain_problem(exc: DomainError) -> ProblemDetailsException:
    """The problem a domain error answers with (also the body of an SSE ``error`` event)."""
    spec = problem_spec(exc)
    if spec is None or (spec.status >= 500 and spec.detail is None):
        return unexpected_problem(exc)
    status, slug, title, detail = spec
    extensions: dict[str, Any] = {}
    headers = None
    if isinstance(exc, ThreadBusy):
        extensions["running_run_id"] = exc.running_run_id
        if exc.running_run_id is None:
            detail = "A run on this thread is ending; retry."
            headers = {"Retry-After": "1"}
    if isinstance(exc, DuplicateMessage):
        extensions["message_id"] = exc.message_id
    if isinstance(exc, IdempotencyMismatch):
        extensions["field"] = exc.field
    if isinstance(exc, AtCapacity):
        headers = {"Retry-After": str(exc.retry_after_seconds)}
    if isinstance(exc, CommitInDoubt):
        headers = {"Retry-After": "5"}
    return http_problem(
        status,
        detail if detail is not None else str(exc),
        slug=slug,
        title=title,
        headers=headers,
        **extensions,
    )


def validation_problem(exc: ValidationException) -> ProblemDetailsException:
    return http_problem(
        422,
        "The request has invalid headers, path or query parameters, or body fields.",
        slug="invalid-request",
        title="Invalid request",
        errors=validation_errors(exc),
    )


_PUBLIC_NAMES = {
    name.lower().replace("-", "_"): name for name in (TENANT_HEADER, USER_HEADER, LOCALE_HEADER)
}
_MISSING = re.compile(r"Missing required (\w+) parameter '([^']+)'")


def _public_name(key: str) -> str:
    """Header parameters by their header name, not the handler's argument name."""
    return _PUBLIC_NAMES.get(key.lower().replace("-", "_"), key)


def validation_errors(exc: ValidationException) -> list[dict[str, str]]:
    """``[{"message", "key", "source"}]``: one entry per invalid value."""
    if isinstance(exc.extra, list):
        return [_error_entry(e) for e in exc.extra]
    if missing := _MISSING.search(exc.detail):
        source, key = missing.groups()
        return [
            {
                "message": f"Missing required {source} parameter",
                "key": _public_name(key),
                "source": source,
            }
        ]
    return [{"message": exc.detail}]


_AT_PATH = re.compile(r"^(?P<message>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_FIELD = re.compile(r"field `([^`]+)`")
_BLANK = f"Expected `str` matching regex {NOT_BLANK_PATTERN!r}"
"""msgspec's words for a blank ``content``: the pattern is for JSON Schema (OpenAPI), not for
the person reading the error."""


def body_errors(exc: msgspec.ValidationError) -> list[dict[str, str]]:
    """msgspec's "Expected `int`, got `str` - at `$.score`" as an ``errors`` entry."""
    match = _AT_PATH.match(str(exc))
    message = match["message"] if match else str(exc)
    key = (match["path"] or "") if match else ""
    key = key.removeprefix(".")
    if field := _FIELD.search(message):
        key = f"{key}.{field[1]}" if key else field[1]
    if message == _BLANK:
        message = f"{key.rsplit('.', 1)[-1] or 'the value'} must not be blank"
    entry = {"message": message, "source": "body"}
    if key:
        entry["key"] = key
    return [entry]


def _error_entry(error: Any) -> dict[str, str]:
    if not isinstance(error, dict):
        return {"message": str(error)}
    entry = {"message": str(error.get("message") or "invalid value")}
    if (key := error.get("key")) is not None:
        entry["key"] = _public_name(str(key))
    if (source := error.get("source")) is not None:
        entry["source"] = str(getattr(source, "value", source))
    return entry


def invalid_body(exc: msgspec.ValidationError) -> ValidationException:
    return ValidationException(detail="Validation failed", extra=body_errors(exc))


def invalid(key: str, source: str, message: str) -> ValidationException:
    """A 422 for one value Litestar's own validation let through."""
    return ValidationException(
        detail="Validation failed", extra=[{"message": message, "key": key, "source": source}]
    )


def litestar_problem(exc: HTTPException) -> ProblemDetailsException:
    """Litestar's own HTTP errors (404 route, 405, 400 body not JSON, 401, 403, 413 …)."""
    status = exc.status_code
    detail = exc.detail if status < 500 else None
    return http_problem(status, detail, headers=exc.headers)


def unexpected_problem(exc: BaseException) -> ProblemDetailsException:
    if storage_unreachable(exc):
        log.error("a storage server is unreachable", exc_info=exc)
        return domain_problem(Unavailable("a storage backend is unreachable"))
    log.error("unhandled error in request", exc_info=exc)
    return http_problem(500, "An unexpected error occurred.")


def problem_body(problem: ProblemDetailsException) -> dict[str, Any]:
    """The JSON body of ``problem`` (as its response would carry it)."""
    body: dict[str, Any] = {
        "type": problem.type_,
        "title": problem.title,
        "status": problem.status_code,
        "detail": problem.detail,
    }
    if isinstance(problem.extra, dict):
        body.update(problem.extra)
    return body


def debug_problem(exc: BaseException) -> ProblemDetailsException:
    if storage_unreachable(exc):
        return unexpected_problem(exc)
    log.error("unhandled error in request", exc_info=exc)
    return http_problem(500, f"{type(exc).__name__}: {exc}")


def problem_details_config(*, debug: bool) -> ProblemDetailsConfig:
    return ProblemDetailsConfig(
        exception_to_problem_detail_map={
            HTTPException: litestar_problem,
            ValidationException: validation_problem,
            DomainError: domain_problem,
            Exception: debug_problem if debug else unexpected_problem,
        }
    )
