"""What "a store cannot be reached" (503 ``unavailable``) means is each profile's knowledge of
its drivers (its settings' ``unreachable``), read through the registry: the app names no
driver, and a profile installed from outside the repository brings its own."""

from __future__ import annotations

import inspect
from pathlib import Path

import psycopg
import psycopg_pool
import pytest
import redis.exceptions
import sqlalchemy.exc

from tests.support.installed import clear_registry, profile_installed
from threadkeeper.app import service
from threadkeeper.app.service import storage_unreachable


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError("connection refused"),
        psycopg_pool.PoolTimeout("no connection"),
        redis.exceptions.ConnectionError("Connection refused"),
        redis.exceptions.TimeoutError("Timeout reading"),
        sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("gone")),
        ConnectionResetError(),
        TimeoutError(),
    ],
    ids=lambda exc: type(exc).__qualname__,
)
def test_the_builtin_profiles_drivers_out_of_reach(exc: BaseException) -> None:
    clear_registry()
    assert storage_unreachable(exc)
    wrapped = RuntimeError("the round failed")
    wrapped.__cause__ = exc
    assert storage_unreachable(wrapped), "found through the cause"


@pytest.mark.parametrize(
    "exc", [psycopg.errors.UniqueViolation("dup"), redis.exceptions.ResponseError("WRONGTYPE")]
)
def test_a_driver_error_that_is_not_about_reach_is_not(exc: BaseException) -> None:
    clear_registry()
    assert not storage_unreachable(exc)


def test_the_app_names_no_driver() -> None:
    source = inspect.getsource(service)
    for driver in ("psycopg", "redis", "asyncmy", "aiosqlite", "sqlalchemy"):
        assert driver not in source, driver


def test_a_profile_installed_from_outside_brings_its_own(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package = tmp_path / "code" / "outside_store"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "settings.py").write_text(
        "from typing import ClassVar\n"
        "import msgspec\n\n"
        "class StoreGone(Exception):\n    pass\n\n"
        "class OutsideSettings(msgspec.Struct, frozen=True):\n"
        "    unreachable: ClassVar[tuple[str, ...]] = (\n"
        "        'outside_store.settings:StoreGone', 'no_such_driver:Gone')\n\n"
        "SETTINGS = OutsideSettings\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    from outside_store.settings import StoreGone  # type: ignore[import-not-found]

    clear_registry()
    assert not storage_unreachable(StoreGone())
    with profile_installed(tmp_path / "site", "outside", "outside_store"):
        assert storage_unreachable(StoreGone()), "its own error, once installed"
        assert storage_unreachable(psycopg.OperationalError()), "the others' still"
    assert not storage_unreachable(StoreGone())
