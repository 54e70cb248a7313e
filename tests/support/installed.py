"""A distribution installed from outside the repository, as pip would leave it: a
``<name>.dist-info`` directory (``METADATA``, ``entry_points.txt``) on ``sys.path``, so that
``importlib.metadata.entry_points`` finds its entry points — how a third-party package adds a
storage profile (``threadkeeper.profiles``) or a hook (``threadkeeper.hooks``)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from threadkeeper.adapters import profiles


@contextmanager
def entry_points_installed(
    where: Path, distribution: str, groups: Mapping[str, Mapping[str, str]]
) -> Iterator[Path]:
    """``distribution`` (metadata only) installed in ``where`` with ``groups`` (group → name →
    value) as its entry points, ``where`` on ``sys.path`` until the block ends."""
    info = where / f"{distribution.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n", encoding="utf-8"
    )
    lines: list[str] = []
    for group, entries in groups.items():
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {value}" for name, value in entries.items())
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines), encoding="utf-8")
    sys.path.insert(0, str(where))
    importlib.invalidate_caches()
    try:
        yield info
    finally:
        sys.path.remove(str(where))
        importlib.invalidate_caches()


def clear_registry() -> None:
    """The profile registry's caches (and the unreachable-error list read from it)."""
    from threadkeeper.app.service import _unreachable

    profiles.registered.cache_clear()
    profiles.profile.cache_clear()
    profiles.profile_settings.cache_clear()
    _unreachable.cache_clear()


@contextmanager
def profile_installed(where: Path, name: str, package: str) -> Iterator[str]:
    """Profile ``name`` (``package``) registered by a distribution installed from outside the
    repository (``docs/writing-a-backend.md``, step 3), the registry's caches cleared before
    and after."""
    distribution = f"outside-{name}-profile"
    with entry_points_installed(where, distribution, {"threadkeeper.profiles": {name: package}}):
        clear_registry()
        try:
            yield name
        finally:
            clear_registry()
    clear_registry()
