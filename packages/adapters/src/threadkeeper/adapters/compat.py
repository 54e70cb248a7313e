"""The versions of the libraries whose internals threadkeeper reaches, and the guard that
refuses to start on any other.

The adapters use private members of LangGraph's savers and serializer (``_dump_checkpoint``,
``_load_checkpoint``, ``_revive_if_needed``, the msgpack hooks, …), run SQL on LangGraph's own
tables (``checkpoints``, ``checkpoint_blobs``, ``checkpoint_writes``) and reach into aiosqlite's
worker thread: none of it is a public contract, and any release of those libraries may change
it. Each such library is pinned here to the release series the test suites were run on
(``uv.lock``), the same range ``packages/adapters/pyproject.toml`` declares (a unit test holds
the two equal), and each profile names the ones it reaches (``Profile.reaches``). A profile
opened beside a version outside its range is refused before it touches storage, in one line
naming the library, the version found and the range tested — not a failure deep in a round,
or data read or written in a shape the library no longer has.

Moving to a new series: run the suites on it (the conformance suites cover what these
internals do), then widen the range here and in ``pyproject.toml`` together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from types import MappingProxyType

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

TESTED: Mapping[str, str] = MappingProxyType(
    {
        # every profile: the serializer's msgpack hooks and type allowlist (adapters.serde,
        # adapters.ledger_codec) and the savers' checkpoint (de)serialization
        "langgraph-checkpoint": ">=4.3.2,<4.4",
        # embedded: SQL on the saver's tables (the ledger, pruning, weighing)
        "langgraph-checkpoint-sqlite": ">=3.1.2,<3.2",
        # embedded: the connection's worker thread and its _execute (adapters.embedded.connection)
        "aiosqlite": ">=0.22.1,<0.23",
        # postgres: SQL on the saver's tables, its blob and write (de)serialization
        "langgraph-checkpoint-postgres": ">=3.2.0,<3.3",
        # redis-mysql: the saver's keys, JSON preprocessing and revival (redis_mysql.saver, .serde)
        "langgraph-checkpoint-redis": ">=0.5.2,<0.6",
        # redis-mysql: the store's query builders (redis_mysql.store)
        "langgraph-checkpoint-mysql": ">=3.0.0,<3.1",
    }
)
"""Distribution → the versions its internals were tested at."""


class UntestedLibrary(RuntimeError):
    """A library whose internals a profile reaches is installed at a version outside the
    range it was tested at (or is missing)."""


def untested(
    profile: str,
    distributions: Iterable[str],
    *,
    version_of: Callable[[str], str] | None = None,
) -> list[str]:
    """One line for each of ``distributions`` installed outside its tested range (none: all
    tested). ``version_of``: the installed version of a distribution (default: its metadata's,
    ``importlib.metadata.version``)."""
    lookup = version if version_of is None else version_of
    problems: list[str] = []
    for name in distributions:
        tested = TESTED[name]
        try:
            found = lookup(name)
        except PackageNotFoundError:
            problems.append(
                f"{name} is not installed; the {profile} profile needs it at {tested} "
                f"(install threadkeeper-adapters[{profile}])"
            )
            continue
        try:
            ok = Version(found) in SpecifierSet(tested)
        except InvalidVersion:
            ok = False
        if not ok:
            problems.append(
                f"{name} {found} is installed, but the {profile} profile uses its internals "
                f"and was tested with {tested} only: install a version in that range"
            )
    return problems


def require_tested(
    profile: str,
    distributions: Iterable[str],
    *,
    version_of: Callable[[str], str] | None = None,
) -> None:
    """Raise ``UntestedLibrary`` (its message: the problems, one per line) unless every one of
    ``distributions`` is installed at a tested version."""
    problems = untested(profile, distributions, version_of=version_of)
    if problems:
        raise UntestedLibrary("; ".join(problems))
