"""The guard on the libraries whose internals the profiles reach (``adapters.compat``): each
held to the series the suites ran on, the same range the distribution declares, and a profile
refused — in one line, before it touches storage — beside any other version."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from threadkeeper.adapters import compat
from threadkeeper.adapters.compat import TESTED, UntestedLibrary, require_tested, untested
from threadkeeper.adapters.profiles import names, profile
from threadkeeper.app.config import ConfigError, Settings
from threadkeeper.app.storage import open_backend

ADAPTERS = Path(__file__).resolve().parents[3] / "packages" / "adapters" / "pyproject.toml"


def declared() -> dict[str, str]:
    """Every requirement of ``threadkeeper-adapters`` (extras included): name → range."""
    project = tomllib.loads(ADAPTERS.read_text(encoding="utf-8"))["project"]
    lines = [*project["dependencies"]]
    for extra in project["optional-dependencies"].values():
        lines.extend(extra)
    return {Requirement(line).name: str(Requirement(line).specifier) for line in lines}


def test_each_tested_range_is_the_one_the_distribution_declares() -> None:
    found = declared()
    for name, tested in TESTED.items():
        assert name in found, f"{name} is not a requirement of threadkeeper-adapters"
        assert set(found[name].split(",")) == set(tested.split(",")), name


def test_every_builtin_profile_names_what_it_reaches_and_is_tested_here() -> None:
    builtin = {"embedded", "postgres", "redis-mysql"}
    assert builtin <= set(names())
    reached: set[str] = set()
    for name in builtin:
        chosen = profile(name)
        assert "langgraph-checkpoint" in chosen.reaches, name  # the serializer's internals
        assert set(chosen.reaches) <= set(TESTED), name
        reached.update(chosen.reaches)
        assert untested(name, chosen.reaches) == [], "the locked versions are the tested ones"
        chosen.check_libraries()
    assert reached == set(TESTED), "a tested range no profile uses"


def fake_versions(**found: str):  # type: ignore[no-untyped-def]
    real = compat.version

    def version_of(name: str) -> str:
        key = name.replace("-", "_")
        if key in found:
            if found[key] == "missing":
                raise PackageNotFoundError(name)
            return found[key]
        return real(name)

    return version_of


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ("0.6.0", "langgraph-checkpoint-redis 0.6.0 is installed, but the redis-mysql profile"),
        ("0.5.1", "langgraph-checkpoint-redis 0.5.1 is installed"),
        ("not-a-version", "langgraph-checkpoint-redis not-a-version is installed"),
        ("missing", "langgraph-checkpoint-redis is not installed; the redis-mysql profile"),
    ],
)
def test_a_version_outside_the_range_is_one_line(found: str, expected: str) -> None:
    version_of = fake_versions(langgraph_checkpoint_redis=found)
    problems = untested("redis-mysql", profile("redis-mysql").reaches, version_of=version_of)
    assert len(problems) == 1
    assert problems[0].startswith(expected), problems[0]
    assert ">=0.5.2,<0.6" in problems[0]
    assert "\n" not in problems[0]
    with pytest.raises(UntestedLibrary, match="langgraph-checkpoint-redis"):
        require_tested("redis-mysql", ["langgraph-checkpoint-redis"], version_of=version_of)


def test_a_patch_release_in_the_series_is_accepted() -> None:
    version_of = fake_versions(langgraph_checkpoint="4.3.9", aiosqlite="0.22.7")
    assert untested("embedded", profile("embedded").reaches, version_of=version_of) == []


async def test_the_service_refuses_to_open_storage_beside_an_untested_saver(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(compat, "version", fake_versions(langgraph_checkpoint_sqlite="3.2.0"))
    settings = Settings.of(profile="embedded", data_dir=str(tmp_path / "data"))
    with pytest.raises(ConfigError) as refused:
        async with open_backend(settings):
            pytest.fail("opened beside an untested saver")
    line = str(refused.value)
    assert line.startswith("langgraph-checkpoint-sqlite 3.2.0 is installed, but the embedded")
    assert ">=3.1.2,<3.2" in line
    assert "\n" not in line
    assert not (tmp_path / "data").exists(), "refused before anything was created"
