"""The start-up line names where the profile keeps its data, never a password."""

from __future__ import annotations

from threadkeeper.app.cli.common import _storage
from threadkeeper.app.config import Settings


def test_the_start_up_line_masks_passwords() -> None:
    redis_mysql = Settings.of(
        profile="redis-mysql",
        service_token="t",
        redis_url="redis://:secret@cache:6380/0",
        mysql_url="mysql+asyncmy://app:hunter2@db:3306/tk",
    )
    shown = _storage(redis_mysql)
    assert "secret" not in shown
    assert "hunter2" not in shown
    assert shown == "redis://:***@cache:6380/0 + mysql+asyncmy://app:***@db:3306/tk"
    postgres = Settings.of(
        profile="postgres", service_token="t", postgres_url="postgresql://u:pw@pg/tk"
    )
    assert _storage(postgres) == "postgresql://u:***@pg/tk"
    assert _storage(Settings.of(data_dir="/srv/tk")) == "/srv/tk"
