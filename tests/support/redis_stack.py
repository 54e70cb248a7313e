"""Private Redis Stack servers for tests and benchmarks that restart, flush or fill Redis.

The shared server (``scripts/redis-stack start``, port 6380) is never restarted or flushed by a
test; a test that needs to do that starts its own instance from the same pinned binaries
(``scripts/redis-stack paths``) on a free port, without persistence, and stops it afterwards.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHARED = os.environ.get("THREADKEEPER_TEST_REDIS", "redis://127.0.0.1:6380/0")


@cache
def binaries() -> tuple[str, str, str]:
    """(redis-server, rejson.so, redisearch.so) of the pinned wheels."""
    out = subprocess.run(
        [str(ROOT / "scripts" / "redis-stack"), "paths"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    server, rejson, search = out[-3:]
    return server, rejson, search


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class PrivateRedis:
    """One private server; ``restart()`` keeps its port (and loses every key: no persistence)."""

    port: int = field(default_factory=free_port)
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="tk-redis-")))
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        server, rejson, search = binaries()
        self.process = subprocess.Popen(
            [
                server,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--loadmodule",
                rejson,
                "--loadmodule",
                search,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not _answers(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private redis-server on {self.port} did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        deadline = time.monotonic() + 5
        while _answers(self.port) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.workdir, ignore_errors=True)
