"""What a slow or greedy client can hold of ``serve`` (issue 29, item 2), on a real server
process over raw sockets: a body shorter than its ``Content-Length`` is answered 408 and its
connection closed once ``THREADKEEPER_HTTP_BODY_TIMEOUT_SECONDS`` passes (before, it held the
connection with no answer and no bound); a request that finds
``THREADKEEPER_HTTP_MAX_CONNECTIONS`` connections open is answered 503 at once; a body that
arrives slowly but within the deadline is served.

Bounds are generous (a busy CI machine): the assertions are on what is answered, not when."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.test_server import free_port, serve, wait_ready

BODY_SECONDS = 3
"""Long enough that a busy machine still sends the second piece and opens the extra connection
well inside it; the 408 test waits it out."""
PAUSE = 0.25
MAX_CONNECTIONS = 3
WAIT = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    data_dir: Path = tmp_path_factory.mktemp("data")
    port = free_port()
    process = serve(
        data_dir,
        port,
        THREADKEEPER_HTTP_BODY_TIMEOUT_SECONDS=str(BODY_SECONDS),
        THREADKEEPER_HTTP_MAX_CONNECTIONS=str(MAX_CONNECTIONS),
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}", process)
        yield "127.0.0.1", port
    finally:
        process.terminate()
        process.wait(timeout=30)


def open_request(address: tuple[str, int], body: bytes, length: int) -> socket.socket:
    """A run request whose head says ``length`` body bytes, with ``body`` sent so far."""
    sock = socket.create_connection(address, timeout=WAIT)
    head = (
        "POST /v1/threads/slow/runs HTTP/1.1\r\nHost: t\r\nX-Tenant-Id: acme-insurance\r\n"
        "X-User-Id: u1\r\n"
        f"Accept: application/json\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()
    sock.sendall(head + body)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or ``WAIT`` passes)."""
    sock.settimeout(WAIT)
    data = b""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"the connection stayed open {WAIT} s; got {data!r}")


def test_a_body_shorter_than_its_length_is_answered_408_and_closed(
    server: tuple[str, int],
) -> None:
    body = json.dumps({"message": {"content": "hello"}}).encode()
    with open_request(server, body[:10], len(body)) as sock:
        answer = read_all(sock)  # returns only once the server closed the connection
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert b"application/problem+json" in head.lower()
    problem = json.loads(payload)
    assert problem["type"] == "urn:threadkeeper:problem:request-timeout"
    assert "THREADKEEPER_HTTP_BODY_TIMEOUT_SECONDS" in problem["detail"]


def test_a_body_that_arrives_in_pieces_within_the_deadline_is_served(
    server: tuple[str, int],
) -> None:
    body = json.dumps({"message": {"content": "hello"}}).encode()
    with open_request(server, body[:5], len(body)) as sock:
        time.sleep(PAUSE)
        sock.sendall(body[5:])
        sock.settimeout(WAIT)
        answer = sock.recv(65536)
    assert answer.startswith(b"HTTP/1.1 200"), answer


def test_requests_past_the_connection_limit_are_answered_503_at_once(
    server: tuple[str, int],
) -> None:
    """uvicorn's ``limit_concurrency``: a request that finds this many connections open (its
    own included) is refused."""
    body = b'{"message": {"content": "hello"}}'
    held = [open_request(server, b"", len(body)) for _ in range(MAX_CONNECTIONS - 1)]
    try:
        for sock in held:  # taken, and waiting for their bodies: nothing answered yet
            sock.settimeout(PAUSE)
            with pytest.raises(TimeoutError):
                sock.recv(1)
        with socket.create_connection(server, timeout=WAIT) as extra:
            extra.sendall(b"GET /health/live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            answer = read_all(extra)
        assert answer.startswith(b"HTTP/1.1 503"), answer
    finally:
        for sock in held:
            sock.close()
    with socket.create_connection(server, timeout=WAIT) as later:  # free again
        later.sendall(b"GET /health/live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        assert read_all(later).startswith(b"HTTP/1.1 200")
