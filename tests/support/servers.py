"""A real ``threadkeeper serve`` process on a profile, with fresh storage of its own.

Only real HTTP gives two requests in flight at once (``AsyncTestClient`` runs requests one
after another), so tests of concurrency and faults talk to a server process.
"""

from __future__ import annotations

import contextlib
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.api.conftest import TOKEN, Servers, flush
from tests.e2e.test_server import free_port, serve, wait_ready
from tests.support.mysql import fresh_database
from tests.support.postgres import fresh_schema
from tests.support.redis_stack import PrivateRedis, private_redis

HEADERS = {"X-Tenant-Id": "acme-insurance", "X-User-Id": "reliability-user"}


@dataclass
class ProfileServer:
    profile: str
    url: str
    headers: dict[str, str]
    servers: Servers
    process: subprocess.Popen[str]
    data_dir: Path
    redis: PrivateRedis | None = None
    log: list[str] = field(default_factory=list)
    """What the server printed so far (read by a thread, so the pipe never fills)."""

    def output(self) -> str:
        return "".join(self.log)


def _drain(process: subprocess.Popen[str], into: list[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        into.append(line)


@contextlib.contextmanager
def start_server(
    profile: str, data_dir: Path, servers: Servers, redis: PrivateRedis | None, **env: str
) -> Iterator[ProfileServer]:
    """``threadkeeper serve`` on storage that already exists (``servers``)."""
    environment = {"THREADKEEPER_PROFILE": profile, **servers.env(), **env}
    headers = dict(HEADERS)
    if profile != "embedded":
        environment["THREADKEEPER_SERVICE_TOKEN"] = TOKEN
        headers["Authorization"] = f"Bearer {TOKEN}"
    port = free_port()
    process = serve(data_dir, port, **environment)
    server = ProfileServer(
        profile, f"http://127.0.0.1:{port}", headers, servers, process, data_dir, redis
    )
    threading.Thread(target=_drain, args=(process, server.log), daemon=True).start()
    try:
        wait_ready(server.url, process)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@contextlib.contextmanager
def storage(profile: str) -> Iterator[tuple[Servers, PrivateRedis | None]]:
    """Fresh storage for ``profile``: a migrated schema, or a database and a private Redis."""
    if profile == "embedded":
        yield Servers(), None
    elif profile == "postgres":
        with fresh_schema() as url:
            yield Servers(postgres_url=url), None
    elif profile == "redis-mysql":
        with private_redis() as redis, fresh_database() as mysql:
            flush(redis.url)
            yield Servers(redis_url=redis.url, mysql_url=mysql), redis
    else:  # pragma: no cover
        raise NotImplementedError(profile)


@contextlib.contextmanager
def profile_server(profile: str, tmp_path: Path, **env: str) -> Iterator[ProfileServer]:
    """A server process on fresh storage of ``profile``."""
    with (
        storage(profile) as (servers, redis),
        start_server(profile, tmp_path / "data", servers, redis, **env) as server,
    ):
        yield server
