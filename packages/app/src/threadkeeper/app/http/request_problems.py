"""Every problem of a ``/v1`` request at once, each with where it is and a sentence (issue 29,
item 4).

Litestar's parameter validation and msgspec's decoding stop at the first problem and say it in
validator words ("Invalid enum value 0", "length >= 36", "Expected `str` matching regex …"): a
request without headers named only ``X-User-Id``; ``{"content": "hi"}`` was "unknown field
content" without saying that ``message`` is missing. Here the headers, the path's ids, the
query and the body are checked in one pass, against the same rules the handlers enforce:

- ``request_problems`` (a guard of the ``/v1`` router, after the token's): headers, path and
  query. A request with a body keeps what it found in ``connection.state`` for the body's hook;
  any other is refused here, every problem named.
- ``body_problems`` (the body's ``before_request`` hook, ``routes.strict_json_body``): walks the
  JSON against the body's struct — a missing field, an unknown one, each field's value — and
  refuses with the guard's problems and its own together.

Each entry is ``{"message", "key", "source"}`` (``source``: ``header``, ``path``, ``query`` or
``body``), as every 422 of the API has been.
"""

from __future__ import annotations

import contextlib
import typing
from typing import Any

import msgspec
from litestar.connection import ASGIConnection
from litestar.exceptions import ValidationException
from litestar.handlers import BaseRouteHandler

from threadkeeper.app.http.schemas import (
    LOCALE_HEADER,
    LOCALE_PATTERN,
    MAX_COMMENT_CHARS,
    TENANT_HEADER,
    THREAD_ID_PATTERN,
    USER_HEADER,
    UUID_PATTERN,
    exact,
)
from threadkeeper.domain.threads import TENANT_OR_USER_ID, USER_ID_RULE, user_id_problem
from threadkeeper.domain.transcript import MAX_PAGE

Problem = dict[str, str]
STATE_KEY = "threadkeeper_request_problems"
"""Where the guard leaves what it found for the body's hook."""

TENANT_RULE = "a tenant id is 1 to 128 of the letters A-Z and a-z, digits and . _ - (not . or ..)"
THREAD_RULE = "1 to 128 of the letters A-Z and a-z, digits and . _ : - (not . or ..)"
RUN_ID_RULE = (
    "a run id is a UUID: 32 hex digits as 8-4-4-4-12, e.g. 3f2b9c1e-0d4a-4c8e-9b1f-2a7e5c3d9f10"
)
LOCALE_RULE = (
    "a locale is loosely BCP 47: 2 or 3 letters, then parts of 1 to 8 letters or digits after "
    "- or _ (en, fa-IR, zh-Hans-CN, zh_CN), at most 64 characters"
)


def problem(key: str, source: str, message: str) -> Problem:
    return {"message": message, "key": key, "source": source}


def refuse(problems: list[Problem]) -> ValidationException:
    return ValidationException(detail="Validation failed", extra=problems)


# -- headers, path, query -------------------------------------------------------------------------


def header_text(value: str) -> str:
    """A header's value as the client meant it: ASGI hands its bytes over read as Latin-1;
    read as UTF-8 where they are UTF-8."""
    with contextlib.suppress(UnicodeError):
        return value.encode("latin-1").decode("utf-8")
    return value


def _header_problems(connection: ASGIConnection[Any, Any, Any, Any]) -> list[Problem]:
    headers = connection.headers
    found: list[Problem] = []
    tenant = headers.get(TENANT_HEADER)
    if tenant is None:
        found.append(problem(TENANT_HEADER, "header", f"{TENANT_HEADER} is missing: {TENANT_RULE}"))
    elif not TENANT_OR_USER_ID.fullmatch(tenant):
        said = f"{tenant[:80]!r} is no tenant id: {TENANT_RULE}"  # never the whole header
        found.append(problem(TENANT_HEADER, "header", said))
    user = headers.get(USER_HEADER)
    if user is None:
        found.append(problem(USER_HEADER, "header", f"{USER_HEADER} is missing: {USER_ID_RULE}"))
    else:
        user = header_text(user)
        if (why := user_id_problem(user)) is not None:
            found.append(problem(USER_HEADER, "header", why))
    locale = headers.get(LOCALE_HEADER)
    if locale is not None and (len(locale) > 64 or not exact(LOCALE_PATTERN, locale)):
        found.append(
            problem(LOCALE_HEADER, "header", f"{locale[:80]!r} is no locale: {LOCALE_RULE}")
        )
    return found


def _path_problems(connection: ASGIConnection[Any, Any, Any, Any]) -> list[Problem]:
    params = connection.path_params
    found: list[Problem] = []
    thread = params.get("thread_id")
    if isinstance(thread, str) and not exact(THREAD_ID_PATTERN, thread):
        found.append(problem("thread_id", "path", f"a thread id is {THREAD_RULE}"))
    run = params.get("run_id")
    if isinstance(run, str) and not exact(UUID_PATTERN, run):
        found.append(problem("run_id", "path", RUN_ID_RULE))
    user = params.get("user_id")
    if isinstance(user, str) and (why := user_id_problem(user)) is not None:
        found.append(problem("user_id", "path", why))
    return found


def _query_problems(connection: ASGIConnection[Any, Any, Any, Any]) -> list[Problem]:
    query = connection.query_params
    found: list[Problem] = []
    limits = query.getall("limit", [])
    rule = f"limit is a whole number from 1 to {MAX_PAGE}, written as digits, given once"
    if len(limits) > 1:
        found.append(problem("limit", "query", f"{rule} (given {len(limits)} times)"))
    elif limits and not (
        limits[0].isascii() and limits[0].isdigit() and 1 <= int(limits[0]) <= MAX_PAGE
    ):
        found.append(problem("limit", "query", f"{rule}, not {limits[0][:40]!r}"))
    befores = query.getall("before", [])
    if len(befores) > 1:
        found.append(problem("before", "query", "before is one message id, given once"))
    elif befores and not exact(THREAD_ID_PATTERN, befores[0]):
        found.append(problem("before", "query", f"before is a message id: {THREAD_RULE}"))
    return found


async def request_problems(
    connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler
) -> None:
    """A guard: every problem of the headers, the path and the query at once (a request with
    a body leaves them to the body's hook, which adds the body's)."""
    found = _header_problems(connection) + _path_problems(connection) + _query_problems(connection)
    if connection.scope.get("method") == "POST":
        connection.state[STATE_KEY] = found
    elif found:
        raise refuse(found)


def earlier_problems(connection: ASGIConnection[Any, Any, Any, Any]) -> list[Problem]:
    """What ``request_problems`` found and left for the body's hook."""
    return list(connection.state.get(STATE_KEY) or [])


# -- the body ---------------------------------------------------------------------------------

_WORDS: dict[str, str] = {
    "message": 'message is an object: {"content": "…"}, with an optional "id"',
    "message.content": "message.content must not be blank: it is the user's message, a string",
    "message.id": f"message.id is a message id: {THREAD_RULE}",
    "run_id": RUN_ID_RULE,
    "score": "score is 1 (helpful) or -1 (not helpful)",
    "comment": f"comment is a string of at most {MAX_COMMENT_CHARS} characters, without NUL",
}
"""The sentence for a field whose value is wrong, by its path."""

_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
    type(None): "null",
}


def _what(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _struct_of(annotation: Any) -> type[msgspec.Struct] | None:
    """The struct an annotation names (``X`` or ``X | None``), if it names one."""
    candidates = typing.get_args(annotation) or (annotation,)
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, msgspec.Struct):
            return candidate
    return None


def body_problems(value: Any, struct: type[msgspec.Struct], at: str = "") -> list[Problem]:
    """Every problem of ``value`` (decoded JSON) as ``struct``: missing and unknown fields,
    and each field's value (nested structs walked), each with its path and a sentence."""
    if not isinstance(value, dict):
        name = at or "the body"
        words = _WORDS.get(at, f"{name} is an object")
        return [problem(at or "", "body", f"{words}; got {_what(value)}")]
    hints = typing.get_type_hints(struct, include_extras=True)
    fields = {field.encode_name: field for field in msgspec.structs.fields(struct)}
    found: list[Problem] = []
    for key in value:
        if key not in fields:
            known = ", ".join(fields)
            where = f"{at}.{key}" if at else key
            found.append(
                problem(where, "body", f"unknown field {key!r}: {at or 'the body'} has {known}")
            )
    for name, field in fields.items():
        where = f"{at}.{name}" if at else name
        if name not in value:
            if field.required:
                words = _WORDS.get(where, f"{where} is required")
                found.append(problem(where, "body", f"{where} is missing: {words}"))
            continue
        annotation = hints[field.name]
        nested = _struct_of(annotation)
        if nested is not None and value[name] is not None:
            found += body_problems(value[name], nested, where)
            continue
        try:
            msgspec.convert(value[name], annotation, strict=True)
        except msgspec.ValidationError as exc:
            said = _WORDS.get(where) or str(exc).split(" - at ", 1)[0]
            found.append(problem(where, "body", f"{said}; got {_shown(value[name])}"))
    return found


def _shown(value: Any) -> str:
    """A value as a problem shows it: short, and never a long user text."""
    if isinstance(value, str):
        return f"a string of {len(value)} characters" if len(value) > 40 else repr(value)
    if isinstance(value, (dict, list)):
        return _what(value)
    return repr(value) if not isinstance(value, bool) else str(value).lower()


def invalid_utf8_at(body: bytes) -> int | None:
    """The byte of the body where its UTF-8 breaks (``None``: it does not)."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None
