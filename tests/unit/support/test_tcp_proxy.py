"""The fault-injecting TCP proxy of ``tests.support.tcp_proxy``: forwarding, cut/restore, a real
network partition (packets dropped in a network namespace) and heal, and the COMMIT triggers —
against a tiny echo server, plus (``integration``) psycopg against the machine's PostgreSQL.

Deadlines are generous on purpose (a busy 2-core machine); no test asserts tight timing."""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from tests.support.postgres import SERVER
from tests.support.tcp_proxy import (
    PartitionProxy,
    PartitionUnsupported,
    TcpProxy,
    partition_supported,
    tcp_proxy,
)
from threadkeeper.adapters.postgres.deadline import StoreTimeout, deadline_connection

WAIT = 10.0  # seconds any "soon" may take


class EchoServer:
    """Echoes every connection; keeps what each connection received, in order."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self.received: list[bytearray] = []
        self.ended: list[threading.Event] = []
        self._changed = threading.Condition()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._changed:
                buffer, ended = bytearray(), threading.Event()
                self.received.append(buffer)
                self.ended.append(ended)
                self._sockets.append(conn)
            threading.Thread(target=self._echo, args=(conn, buffer, ended), daemon=True).start()

    def _echo(self, conn: socket.socket, buffer: bytearray, ended: threading.Event) -> None:
        try:
            while data := conn.recv(65536):
                with self._changed:
                    buffer.extend(data)
                    self._changed.notify_all()
                conn.sendall(data)
        except OSError:
            pass
        finally:
            ended.set()
            with self._changed:
                self._changed.notify_all()
            conn.close()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
        with self._changed:
            return self._changed.wait_for(predicate, timeout)

    def wait_received(self, index: int, data: bytes, timeout: float = WAIT) -> bytes:
        """What connection ``index`` got, once it starts with ``data`` (or at the deadline)."""
        self.wait_for(
            lambda: len(self.received) > index and self.received[index][: len(data)] == data,
            timeout,
        )
        return bytes(self.received[index]) if len(self.received) > index else b""

    def close(self) -> None:
        with suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        for conn in self._sockets:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def connect(proxy: TcpProxy, *, user_timeout_ms: int | None = None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if user_timeout_ms is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, user_timeout_ms)
    sock.settimeout(WAIT)
    sock.connect(proxy.address)
    return sock


def recv_exactly(sock: socket.socket, size: int, timeout: float = WAIT) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def roundtrip(sock: socket.socket, data: bytes) -> None:
    sock.sendall(data)
    assert recv_exactly(sock, len(data)) == data


def assert_dropped(sock: socket.socket) -> None:
    """The peer closed or reset the connection (not: nothing happened)."""
    sock.settimeout(WAIT)
    try:
        rest = sock.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return
    assert rest == b"", f"expected EOF or a reset, got {rest!r}"


def namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout


@pytest.fixture(scope="module", autouse=True)
def no_namespace_left_behind() -> Iterator[None]:
    yield
    mine = f"tkp-{os.getpid()}-"
    assert mine not in namespaces(), namespaces()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.close()


@pytest.fixture
def needs_netns() -> None:
    if not partition_supported():
        pytest.skip("network namespaces are not available here (needs root and iproute2)")


@pytest.fixture(params=["loopback", "netns"])
def proxy(request: pytest.FixtureRequest, echo: EchoServer) -> Iterator[TcpProxy]:
    if request.param == "netns":
        request.getfixturevalue("needs_netns")
    with tcp_proxy("127.0.0.1", echo.port, partitionable=request.param == "netns") as made:
        yield made


@pytest.fixture
def netns_proxy(needs_netns: None, echo: EchoServer) -> Iterator[TcpProxy]:
    with PartitionProxy("127.0.0.1", echo.port) as made:
        yield made


# -- forwarding and addresses --------------------------------------------------------------


def test_forwards_both_ways(proxy: TcpProxy, echo: EchoServer) -> None:
    payload = os.urandom(300_000)
    first, second = connect(proxy), connect(proxy)
    with first, second:
        first.sendall(payload)
        assert recv_exactly(first, len(payload)) == payload
        roundtrip(second, b"hello")
    assert proxy.connections == 2
    assert proxy.bytes_forwarded["to_server"] == len(payload) + 5
    assert echo.wait_for(lambda: proxy.bytes_forwarded["to_client"] == len(payload) + 5)


def test_addresses() -> None:
    with TcpProxy("127.0.0.1", 9) as proxy:
        assert proxy.host == "127.0.0.1"
        assert proxy.address == ("127.0.0.1", proxy.port)
        assert proxy.url("postgresql://postgres@127.0.0.1:5432/test?options=-c%20x") == (
            f"postgresql://postgres@127.0.0.1:{proxy.port}/test?options=-c%20x"
        )
        assert proxy.url("mysql+aiomysql://u:p%40ss@localhost/db") == (
            f"mysql+aiomysql://u:p%40ss@127.0.0.1:{proxy.port}/db"
        )
        assert proxy.url("redis://127.0.0.1:6379/0") == f"redis://127.0.0.1:{proxy.port}/0"


def test_netns_proxy_listens_in_its_own_namespace(netns_proxy: TcpProxy) -> None:
    assert netns_proxy.namespace is not None
    assert netns_proxy.host == netns_proxy.namespace.ns_ip
    assert netns_proxy.host.startswith("10.")
    with pytest.raises(ConnectionRefusedError):  # nothing listens on that port in the root ns
        socket.create_connection(("127.0.0.1", netns_proxy.port), timeout=WAIT).close()


# -- cut / restore -------------------------------------------------------------------------


def test_cut_drops_connections_and_refuses_new_ones_until_restored(proxy: TcpProxy) -> None:
    with connect(proxy) as sock:
        roundtrip(sock, b"before")
        proxy.cut()
        assert proxy.is_cut
        assert_dropped(sock)
    with pytest.raises(ConnectionRefusedError):
        connect(proxy)
    port = proxy.port
    proxy.restore()
    assert proxy.port == port
    with connect(proxy) as sock:
        roundtrip(sock, b"after")


# -- hang / unhang --------------------------------------------------------------------------


def nothing_arrives(sock: socket.socket, seconds: float = 0.5) -> bool:
    """No byte and no EOF within ``seconds`` (the connection is open and silent)."""
    sock.settimeout(seconds)
    try:
        sock.recv(1)
    except TimeoutError:
        return True
    return False


def test_hang_keeps_connections_open_and_answers_nothing(proxy: TcpProxy, echo: EchoServer) -> None:
    with connect(proxy) as idle, connect(proxy) as busy:
        roundtrip(idle, b"before")
        roundtrip(busy, b"before")
        proxy.hang()
        assert proxy.is_hung
        busy.sendall(b"lost")  # read and dropped: the server never gets it
        assert nothing_arrives(busy)
        with connect(proxy) as late:  # accepted (no refusal), never joined to the server
            late.sendall(b"hello?")
            assert nothing_arrives(late)
            assert proxy.connections == 2
            proxy.unhang()
            assert_dropped(late)  # accepted while hung: closed
        assert_dropped(busy)  # lost bytes: out of step with the server, closed
        roundtrip(idle, b"after")  # lost nothing: carries on
    # (the proxy joins connections to the server in threads: in either order)
    assert echo.wait_for(lambda: sorted(map(bytes, echo.received)) == [b"before", b"beforeafter"])
    with connect(proxy) as fresh:
        roundtrip(fresh, b"fresh")


def test_a_reply_in_flight_when_the_proxy_hangs_is_dropped(proxy: TcpProxy) -> None:
    """The echo's reply comes back while hung: the client never sees it."""
    with connect(proxy) as sock:
        roundtrip(sock, b"warm")
        proxy.hang()
        sock.sendall(b"x")  # dropped on its way in, so no reply either
        assert nothing_arrives(sock)
        proxy.unhang()
        assert_dropped(sock)


# -- partition / heal ----------------------------------------------------------------------


def test_partition_needs_a_partitionable_proxy(echo: EchoServer) -> None:
    with TcpProxy("127.0.0.1", echo.port) as plain:
        with pytest.raises(PartitionUnsupported):
            plain.partition()
        with pytest.raises(PartitionUnsupported):
            plain.partition_after(b"COMMIT")


def test_partition_drops_packets_and_heal_resumes_the_same_connection(
    netns_proxy: TcpProxy, echo: EchoServer
) -> None:
    impatient = connect(netns_proxy, user_timeout_ms=1000)
    patient = connect(netns_proxy)
    with impatient, patient:
        roundtrip(impatient, b"ping")
        roundtrip(patient, b"ping")
        netns_proxy.partition()
        assert netns_proxy.partitioned

        # With TCP_USER_TIMEOUT the kernel gives up on unacknowledged data by itself.
        impatient.sendall(b"lost?")
        with pytest.raises(TimeoutError) as error:
            recv_exactly(impatient, 5, timeout=WAIT)
        assert error.value.errno == errno.ETIMEDOUT, f"the kernel's error, not {error.value!r}"

        # Without it the connection just hangs: no reset, no EOF, only our own timeout.
        patient.sendall(b"during")
        with pytest.raises(TimeoutError) as hang:
            recv_exactly(patient, 6, timeout=2)
        assert hang.value.errno is None, f"the socket timeout expected, got {hang.value!r}"

        # New connections do not get through either (the SYN is dropped, not refused).
        with pytest.raises(TimeoutError):
            connect(netns_proxy, user_timeout_ms=1000).close()

        netns_proxy.heal()
        assert not netns_proxy.partitioned
        # TCP retransmits: the bytes sent during the partition arrive, the connection goes on.
        assert recv_exactly(patient, 6, timeout=30) == b"during"
        roundtrip(patient, b"after")
    with connect(netns_proxy) as fresh:
        roundtrip(fresh, b"new")
    assert b"lost?" not in b"".join(echo.received)


def test_parallel_partitionable_proxies_are_independent(
    needs_netns: None, echo: EchoServer
) -> None:
    with (
        PartitionProxy("127.0.0.1", echo.port) as one,
        PartitionProxy("127.0.0.1", echo.port) as two,
    ):
        assert one.namespace is not None
        assert two.namespace is not None
        assert one.namespace.name != two.namespace.name
        assert not one.namespace.subnet.overlaps(two.namespace.subnet)
        one.partition()
        with connect(two) as sock:
            roundtrip(sock, b"still fine")
        one.heal()
        with connect(one) as sock:
            roundtrip(sock, b"healed")


def test_close_removes_the_namespace_and_veth(needs_netns: None, echo: EchoServer) -> None:
    proxy = PartitionProxy("127.0.0.1", echo.port)
    assert proxy.namespace is not None
    name, veth = proxy.namespace.name, proxy.namespace.root_if
    assert name in namespaces()
    assert veth in links()
    sock = connect(proxy)
    roundtrip(sock, b"x")
    proxy.partition()  # closing while partitioned, with a connection open
    proxy.close()
    proxy.close()  # idempotent
    sock.close()
    assert name not in namespaces()
    assert veth not in links()


# -- triggers ------------------------------------------------------------------------------


def test_cut_after_forwards_the_pattern_chunk_then_cuts(proxy: TcpProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        roundtrip(sock, b"BEGIN;")
        roundtrip(sock, b"INSERT 1;")
        tripped = proxy.cut_after(b"COMMIT")
        assert not tripped.is_set()
        sock.sendall(b"COMMIT;")
        assert tripped.wait(WAIT)
        assert echo.wait_received(0, b"BEGIN;INSERT 1;COMMIT;") == b"BEGIN;INSERT 1;COMMIT;"
        assert_dropped(sock)  # the reply to COMMIT never arrives
    assert echo.ended[0].wait(WAIT), "the server saw its connection end"
    assert bytes(echo.received[0]) == b"BEGIN;INSERT 1;COMMIT;"
    with pytest.raises(ConnectionRefusedError):
        connect(proxy)
    proxy.restore()
    with connect(proxy) as sock:  # the trigger fired once and is gone
        roundtrip(sock, b"COMMIT;")


def test_cut_before_withholds_the_pattern_chunk(proxy: TcpProxy, echo: EchoServer) -> None:
    with connect(proxy) as sock:
        roundtrip(sock, b"BEGIN;")
        roundtrip(sock, b"INSERT 1;")
        tripped = proxy.cut_before(b"COMMIT")
        sock.sendall(b"COMMIT;")
        assert tripped.wait(WAIT)
        assert_dropped(sock)
    assert echo.ended[0].wait(WAIT)
    assert bytes(echo.received[0]) == b"BEGIN;INSERT 1;"


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_pattern_split_across_sends_still_trips(
    proxy: TcpProxy, echo: EchoServer, when: str
) -> None:
    tripped = proxy.cut_after(b"COMMIT") if when == "after" else proxy.cut_before(b"COMMIT")
    with connect(proxy) as sock:
        roundtrip(sock, b"BEGIN;CO")  # the server has it: "CO" came in a chunk of its own
        assert not tripped.is_set()
        sock.sendall(b"MMIT;")
        assert tripped.wait(WAIT)
        assert_dropped(sock)
    assert echo.ended[0].wait(WAIT)
    expected = b"BEGIN;COMMIT;" if when == "after" else b"BEGIN;CO"
    assert bytes(echo.received[0]) == expected


def test_a_trigger_on_the_reply_stream(proxy: TcpProxy) -> None:
    tripped = proxy.cut_after(b"OK", direction="to_client")
    with connect(proxy) as sock:
        roundtrip(sock, b"first;")
        sock.sendall(b"OK?")
        assert tripped.wait(WAIT)
        assert recv_exactly(sock, 3) == b"OK?"  # the chunk with the pattern got through
        assert_dropped(sock)


def test_partition_after_holds_the_reply_until_heal(
    netns_proxy: TcpProxy, echo: EchoServer
) -> None:
    with connect(netns_proxy) as sock:
        roundtrip(sock, b"BEGIN;")
        tripped = netns_proxy.partition_after(b"COMMIT")
        sock.sendall(b"COMMIT;")
        assert tripped.wait(WAIT)
        assert netns_proxy.partitioned
        assert echo.wait_received(0, b"BEGIN;COMMIT;") == b"BEGIN;COMMIT;"
        with pytest.raises(TimeoutError):  # the server answered; the answer is "in the network"
            recv_exactly(sock, 7, timeout=2)
        netns_proxy.heal()
        assert recv_exactly(sock, 7, timeout=30) == b"COMMIT;"
        roundtrip(sock, b"more")


def test_partition_before_withholds_the_chunk_until_heal(
    netns_proxy: TcpProxy, echo: EchoServer
) -> None:
    with connect(netns_proxy) as sock:
        roundtrip(sock, b"BEGIN;")
        tripped = netns_proxy.partition_before(b"COMMIT")
        sock.sendall(b"COMMIT;")
        assert tripped.wait(WAIT)
        assert not echo.wait_for(lambda: b"COMMIT" in echo.received[0], timeout=1.5)
        assert bytes(echo.received[0]) == b"BEGIN;"
        netns_proxy.heal()  # as if TCP retransmitted the lost segment
        assert echo.wait_received(0, b"BEGIN;COMMIT;") == b"BEGIN;COMMIT;"
        assert recv_exactly(sock, 7, timeout=30) == b"COMMIT;"


@pytest.mark.parametrize("when", ["after", "before"])
def test_a_mend_while_a_trigger_fires_leaves_the_proxy_healed(
    netns_proxy: TcpProxy, echo: EchoServer, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """A pipe takes the trigger for a COMMIT just as the test mends (disarm, then heal): the
    mend waits for the partition to be in place and undoes it. Before, ``heal`` found nothing
    partitioned yet and returned, and the trigger partitioned the proxy right after — for
    good: a storage fault test's run after the mend hung (CI, 2026-12-07)."""
    namespace_of = netns_proxy._require_namespace  # the first step of carrying it out
    taken = threading.Event()

    def slowly() -> Any:
        if threading.current_thread() is not threading.main_thread():  # the pipe, not heal()
            taken.set()
            time.sleep(0.5)  # the window between taking the trigger and the partition
        return namespace_of()

    monkeypatch.setattr(netns_proxy, "_require_namespace", slowly)
    with connect(netns_proxy) as sock:
        roundtrip(sock, b"BEGIN;")
        arm = netns_proxy.partition_after if when == "after" else netns_proxy.partition_before
        tripped = arm(b"COMMIT")
        sock.sendall(b"COMMIT;")
        assert taken.wait(WAIT)
        netns_proxy.disarm()  # what Rig.mend does
        netns_proxy.heal()
        assert tripped.is_set()
        assert not netns_proxy.partitioned
        assert echo.wait_received(0, b"BEGIN;COMMIT;") == b"BEGIN;COMMIT;"
        assert recv_exactly(sock, 7, timeout=30) == b"COMMIT;"
        roundtrip(sock, b"after the mend")


def test_arming_rejects_bad_arguments(proxy: TcpProxy) -> None:
    with pytest.raises(ValueError, match="non-empty"):
        proxy.cut_after(b"")
    with pytest.raises(ValueError, match="direction"):
        proxy.cut_after(b"X", direction="sideways")  # type: ignore[arg-type]


# -- a real driver against the machine's PostgreSQL ----------------------------------------

PG = urlsplit(SERVER)
FAST_FAILURE = {"tcp_user_timeout": 1000, "connect_timeout": 10}
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 1,
    "keepalives_interval": 1,
    "keepalives_count": 1,
}


@pytest.fixture
def table() -> Iterator[str]:
    name = f"tk_proxy_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(SERVER, autocommit=True) as direct:
        direct.execute(f"CREATE TABLE {name} (id int)")
    yield name
    with psycopg.connect(SERVER, autocommit=True) as direct:
        direct.execute(f"DROP TABLE IF EXISTS {name}")


def rows(table: str) -> int:
    with psycopg.connect(SERVER, autocommit=True) as direct:
        found = direct.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(found[0]) if found else 0


def wait_for_rows(table: str, expected: int) -> int:
    """The table's row count once it is ``expected`` (the server may still be committing)."""
    deadline = time.monotonic() + WAIT
    while (found := rows(table)) != expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


@pytest.mark.integration
async def test_psycopg_notices_a_partition_within_seconds(needs_netns: None) -> None:
    with PartitionProxy(PG.hostname or "127.0.0.1", PG.port or 5432) as proxy:
        conn = await psycopg.AsyncConnection.connect(
            make_conninfo(proxy.url(SERVER), **FAST_FAILURE), autocommit=True
        )
        try:
            assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
            proxy.partition()
            started = time.monotonic()
            with pytest.raises(psycopg.OperationalError):
                await asyncio.wait_for(conn.execute("SELECT 1"), 60)
            assert time.monotonic() - started < 15
        finally:
            proxy.heal()
            await conn.close()


@pytest.mark.integration
async def test_psycopg_waits_for_ever_on_a_hung_server_unless_given_a_deadline() -> None:
    """What issue 29, item 1 is about: libpq has no read timeout, and a hung server's kernel
    acknowledges every byte, so neither ``tcp_user_timeout`` nor keepalives end the wait; the
    service's connections (``adapters.postgres.deadline``) fail within their deadline, closed."""
    with tcp_proxy(PG.hostname or "127.0.0.1", PG.port or 5432) as proxy:
        conninfo = make_conninfo(proxy.url(SERVER), **FAST_FAILURE, **KEEPALIVES)
        plain = await psycopg.AsyncConnection.connect(conninfo, autocommit=True)
        bounded = await deadline_connection(1.0).connect(conninfo, autocommit=True)
        waiting: asyncio.Future[Any] | None = None
        try:
            for conn in (plain, bounded):
                assert await (await conn.execute("SELECT 1")).fetchone() == (1,)
            proxy.hang()
            waiting = asyncio.ensure_future(plain.execute("SELECT 1"))
            with pytest.raises(TimeoutError):  # still waiting after 4 s (and would for ever)
                await asyncio.wait_for(asyncio.shield(waiting), 4)
            started = time.monotonic()
            with pytest.raises(StoreTimeout, match="did not answer within 1 s"):
                await asyncio.wait_for(bounded.execute("SELECT 1"), 60)
            assert time.monotonic() - started < 30  # generous: about 1 s
            assert bounded.closed, "a connection out of step is never used again"
            assert isinstance(StoreTimeout("x"), psycopg.OperationalError)  # 503 unavailable
        finally:
            proxy.unhang()  # closes the plain connection (it lost its query): it fails at last
            if waiting is not None:
                with suppress(psycopg.OperationalError):
                    await asyncio.wait_for(waiting, 60)
            await plain.close()
            await bounded.close()


@pytest.mark.integration
@pytest.mark.parametrize("fault", ["cut", "partition"])
async def test_in_doubt_commit_is_committed_though_the_client_got_an_error(
    request: pytest.FixtureRequest, table: str, fault: str
) -> None:
    if fault == "partition":
        request.getfixturevalue("needs_netns")
    target = (PG.hostname or "127.0.0.1", PG.port or 5432)
    with tcp_proxy(*target, partitionable=fault == "partition") as proxy:
        # tcp_user_timeout alone only fires while sent bytes are unacknowledged; the client
        # waiting for the COMMIT's reply may have nothing unacknowledged, so keepalives too.
        conn = await psycopg.AsyncConnection.connect(
            make_conninfo(proxy.url(SERVER), **FAST_FAILURE, **KEEPALIVES), autocommit=True
        )
        try:
            tripped = (
                proxy.cut_after(b"COMMIT") if fault == "cut" else proxy.partition_after(b"COMMIT")
            )
            with pytest.raises(psycopg.OperationalError):
                async with conn.transaction():
                    await conn.execute(f"INSERT INTO {table} VALUES (1)")
            assert tripped.is_set()
        finally:
            if proxy.partitioned:
                proxy.heal()
            await conn.close()
    found = await asyncio.to_thread(wait_for_rows, table, 1)
    assert found == 1, "the COMMIT reached the server: the row is there"
