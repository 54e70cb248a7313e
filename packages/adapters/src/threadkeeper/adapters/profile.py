"""What a storage profile is: the contract every ``adapters/<profile>/`` satisfies.

A profile is chosen by name (``THREADKEEPER_PROFILE``) from the registry
(``adapters.profiles``). It declares its own settings (a frozen msgspec struct whose fields
are ``THREADKEEPER_<FIELD>`` variables, and which says whether callers need a service token
and whether its checkpoints are the record), migrates and checks its schema, and opens a
``StorageBackend``: everything a running service stores through (the app's port,
``threadkeeper.ports.storage.Backend``, plus the saver the adapters' own checks read).

Adding a profile: one new folder ``adapters/<name>/`` whose ``settings`` module defines
``SETTINGS`` (the struct) and whose package defines ``PROFILE`` (a ``Profile``), plus its entry
point (group ``threadkeeper.profiles``, read by ``adapters.profiles``). ``threadkeeper.conformance``
holds the suites a new profile must pass (``docs/writing-a-backend.md``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from threadkeeper.ports.storage import (
    Backend,
    ProfileRetention,
    Reads,
    Rounds,
    RoundUnit,
    Transcript,
    Upkeep,
)

if TYPE_CHECKING:  # the registry reads profiles' settings without importing any of this
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from threadkeeper.adapters.atomic import AtomicSaver
    from threadkeeper.adapters.rounds import RoundStore, RoundWork

__all__ = [
    "Backend",
    "Profile",
    "ProfileRetention",
    "Reads",
    "RoundUnit",
    "Rounds",
    "SchemaNotReady",
    "StorageBackend",
    "Transcript",
    "Upkeep",
    "masked_url",
]


class StorageBackend(Backend, Protocol):
    """What a profile's ``open`` yields: the app's port (``threadkeeper.ports.storage.Backend``)
    plus what only the adapters and their conformance suites reach — the profile's own saver,
    its round store, and the concrete types of the checkpointer and the round."""

    @property
    def saver(self) -> BaseCheckpointSaver[Any]:
        """The profile's own saver (reads; retention; the conformance suites' checks)."""
        ...

    @property
    def checkpointer(self) -> AtomicSaver: ...

    @property
    def rounds(self) -> RoundStore: ...

    def round(self, thread_key: str, claim: str) -> AbstractContextManager[RoundWork]: ...


class Profile(ABC):
    """One storage profile (see the module docstring)."""

    name: ClassVar[str]
    """The registry's name of the profile (``THREADKEEPER_PROFILE``). What the profile *is* —
    whether callers need a service token, whether its checkpoints are the record (which
    decides its default history hooks) — its settings struct declares (``requires_token``
    and ``history_in_checkpoints`` class variables)."""
    schema_server: ClassVar[str | None] = None
    """The server that holds the schema ``migrate`` creates (``None``: set up at start)."""
    reaches: ClassVar[tuple[str, ...]] = ()
    """The distributions whose internals the profile uses (``adapters.compat.TESTED`` names
    the versions each was tested at): ``check_libraries`` refuses any other version."""

    def check_libraries(self) -> None:
        """Before opening: refuse a library this profile ``reaches`` at an untested version.

        Raises:
            UntestedLibrary: one line per library, naming the version found and the range
                tested.
        """
        from threadkeeper.adapters.compat import require_tested

        require_tested(self.name, self.reaches)

    @abstractmethod
    def open(
        self, settings: Any, *, exclusive: bool = True
    ) -> AbstractAsyncContextManager[StorageBackend]:
        """Open the backend on ``settings`` (the profile's own struct). ``exclusive=False``:
        beside a running server, for commands that only read.

        Raises:
            SchemaNotReady: the schema is missing or behind (``threadkeeper migrate``).
        """

    async def migrate(self, settings: Any) -> list[str]:
        """Create or upgrade the schema; the steps taken (none by default)."""
        return []

    async def schema_problems(self, settings: Any) -> list[str]:
        """What is missing or behind (empty: current). Raises when the servers cannot be
        reached."""
        return []

    def storage(self, settings: Any) -> str:
        """Where the profile keeps its data, credentials masked (the start-up line)."""
        return self.name

    def startup_problem(self, exc: BaseException) -> str | None:
        """One line for a start-up failure this profile knows (``None``: not one)."""
        return None


class SchemaNotReady(RuntimeError):
    """The database lacks threadkeeper's schema, or has an older one."""


def masked_url(url: str) -> str:
    """``url`` with its password hidden (SQLAlchemy's URL parser reads every scheme here:
    ``postgresql://``, ``mysql+asyncmy://``, ``redis://``); a URL it cannot read is shown as
    its scheme alone."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url.split("://", 1)[0] + "://…"
