"""What every command shares: the argument types (ids checked as the API checks them),
failing with one line, the settings, and reaching the storage."""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
import uuid
from pathlib import Path
from typing import Any, NoReturn

from threadkeeper.app.config import (
    ConfigError,
    Settings,
    load_settings,
    mask_url,
    redact,
    secrets_of,
)

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TENANT = "demo"
DEFAULT_USER = "demo-user"
TOKEN_VARIABLE = "THREADKEEPER_SERVICE_TOKEN"
TENANT_OR_USER = (
    r"(?:[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}|\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,126}"
    r"|\.\.[A-Za-z0-9._-]{1,126})"
)
"""``threadkeeper.domain.threads.TENANT_OR_USER_ID`` (checked equal by the unit tests; the
domain module is not imported for ``--help``)."""
THREAD = (
    r"(?:[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}|\.[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,126}"
    r"|\.\.[A-Za-z0-9._:-]{1,126})"
)
"""``threadkeeper.domain.threads.THREAD_ID``."""
UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"

log = logging.getLogger("threadkeeper")


def _fail(message: str, code: int = 2) -> NoReturn:
    """One line on standard error, then exit (status 2: the command was given something that
    cannot work)."""
    print(f"threadkeeper: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(code)


def _settings() -> Settings:
    try:
        return load_settings()
    except ConfigError as exc:
        _fail(f"configuration error: {exc}")


def _one_line(exc: BaseException, settings: Settings | None = None) -> str:
    """An exception as one line, credentials masked."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return redact(text, secrets_of(settings) if settings is not None else set())


# -- arguments ---------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """Usage errors are one line (and exit status 2), not the usage text and a line."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _matching(pattern: str, what: str, rule: str) -> Any:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}: {rule}")
        return value

    return check


_tenant_or_user_arg = _matching(
    TENANT_OR_USER,
    "a tenant id",
    "1 to 128 of the letters A-Z and a-z, digits and . _ - (not . or ..)",
)


def _user_arg(value: str) -> str:
    """A user id as the backend sends it (``domain.threads.user_id_problem``)."""
    from threadkeeper.domain.threads import user_id_problem

    problem = user_id_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _stored_user(user_id: str) -> str:
    from threadkeeper.domain.threads import stored_user_id

    return stored_user_id(user_id)


_thread_arg = _matching(
    THREAD,
    "a thread id",
    "1 to 128 of the letters A-Z and a-z, digits and . _ : - (not . or ..)",
)


def _run_id(value: str) -> str:
    """A run id in any letter case, canonical (lower case) as the API stores it."""
    if not re.fullmatch(UUID, value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a run id (a UUID)")
    return str(uuid.UUID(value))


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {number}")
    return number


def _counter_name(value: str) -> str:
    from threadkeeper.app.counters import NAMED

    if value in NAMED:
        return value
    if not value.endswith(".json"):
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(NAMED)} or a tokenizer.json path, not {value!r}"
        )
    if not Path(value).is_file():
        raise argparse.ArgumentTypeError(f"{value} is not a file")
    return value


# -- backends ----------------------------------------------------------------------------


def _storage_failure(exc: BaseException, settings: Settings) -> NoReturn:
    """A storage server out of reach: one line, exit status 1."""
    _fail(f"cannot reach the {settings.profile} storage: {_one_line(exc, settings)}", code=1)


def _run_on_storage(settings: Settings, work: Any) -> Any:
    """``asyncio.run(work)``; a schema not ready or a storage server out of reach is one line
    (credentials masked), not a traceback."""
    try:
        return asyncio.run(work)
    except ConfigError as exc:
        _fail(f"configuration error: {_one_line(exc, settings)}")
    except Exception as exc:
        from threadkeeper.app.service import storage_unreachable

        if storage_unreachable(exc):
            _storage_failure(exc, settings)
        raise


# -- serve -------------------------------------------------------------------------------


def _schema_problems(settings: Settings) -> tuple[list[str] | None, str | None]:
    """The profile's schema problems (``None``: its database cannot be reached) and the
    server holding its schema (``None``: the profile sets its tables up at start)."""
    from threadkeeper.app.storage import schema_problems, schema_server

    server = schema_server(settings)
    if server is None:
        return [], None
    try:
        return asyncio.run(schema_problems(settings)), server
    except Exception as exc:
        print(f"threadkeeper: cannot reach {server}: {_one_line(exc, settings)}", file=sys.stderr)
        return None, server


def _storage(settings: Settings) -> str:
    """Where the profile keeps its data, credentials masked (the start-up line)."""
    from threadkeeper.app.storage import storage_of

    return mask_url(storage_of(settings))


def _models(settings: Settings) -> str:
    if settings.model_fallback:
        return f"{settings.model}, fallback {settings.model_fallback}"
    return settings.model
