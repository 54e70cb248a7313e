"""The configured profile, reached through the registry (part of the composition root).

Light on purpose: the commands that only read open the backend through here without building
the agent (``container`` imports the model, the hooks and LangChain's agent factory). No
profile is named here: ``settings.profile`` selects the registry's entry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from threadkeeper.adapters.profile import Backend, SchemaNotReady
from threadkeeper.adapters.profiles import profile
from threadkeeper.app.config import ConfigError, Settings
from threadkeeper.app.stored import StoredThreads
from threadkeeper.domain.threads import ThreadScope


async def backend_resource(settings: Settings, *, exclusive: bool = True) -> AsyncIterator[Backend]:
    """The profile's backend, opened for as long as the generator runs (a ``Resource``). A
    schema that is missing or behind is a configuration error (``threadkeeper migrate``), and
    so is a library whose internals the profile uses at a version it was not tested with
    (``adapters.compat``).
    ``exclusive=False``: beside a running server (commands that only read)."""
    from threadkeeper.adapters.compat import UntestedLibrary
    from threadkeeper.app.instrumentation import instrument_backend, instrument_storage

    chosen = profile(settings.profile)
    try:
        chosen.check_libraries()  # an untested LangGraph saver: refused before any connection
    except UntestedLibrary as exc:
        raise ConfigError(str(exc)) from exc
    instrument_storage()  # database spans when tracing is on (before any connection opens)
    try:
        async with chosen.open(settings.storage, exclusive=exclusive) as backend:
            instrument_backend(backend)
            yield backend
    except SchemaNotReady as exc:
        raise ConfigError(str(exc)) from exc


open_backend = asynccontextmanager(backend_resource)
"""``async with open_backend(settings, exclusive=False) as backend``."""


@asynccontextmanager
async def open_stored(
    settings: Settings, *, read_only: bool = True
) -> AsyncIterator[StoredThreads]:
    """The stored threads alone — no model, hooks or agent: what the commands use.
    ``read_only``: beside a running server (on a profile with one process per data
    directory, without taking it)."""
    async with open_backend(settings, exclusive=not read_only) as backend:
        yield StoredThreads(backend, ThreadScope(settings.thread_scope))


def storage_of(settings: Settings) -> str:
    """Where the profile keeps its data (the start-up line; mask it before showing it)."""
    return profile(settings.profile).storage(settings.storage)


def startup_problem(exc: BaseException, settings: Settings) -> str | None:
    """The profile's own line for a start-up failure it knows (``None``: not one)."""
    return profile(settings.profile).startup_problem(exc)


async def migrate(settings: Settings) -> list[str]:
    """Create or upgrade the profile's schema; the steps taken."""
    return await profile(settings.profile).migrate(settings.storage)


def schema_server(settings: Settings) -> str | None:
    """The server holding the profile's schema (``None``: its tables are set up at start)."""
    return profile(settings.profile).schema_server


async def schema_problems(settings: Settings) -> list[str]:
    """What the profile's schema lacks (empty: current); raises when out of reach."""
    return await profile(settings.profile).schema_problems(settings.storage)
