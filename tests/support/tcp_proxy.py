"""A TCP proxy that a test can cut or partition: a storage server "goes away" for the service
under test while the machine's shared server (which other tests use) keeps running.

* :meth:`TcpProxy.cut` / :meth:`TcpProxy.restore`: the server is *down* — open connections are
  closed (the client sees EOF or a reset at once) and new ones are refused until restored.
* :meth:`TcpProxy.partition` / :meth:`TcpProxy.heal` (only with ``partitionable=True``): the
  *network* is broken — packets are dropped silently both ways, connections stay open, and the
  client only notices through its own timeouts (``tcp_user_timeout``, keepalives, a statement
  timeout). After healing, TCP retransmits and the same connections carry on. The listening
  socket then lives in a fresh network namespace behind a veth pair (see
  :mod:`tests.support.netns`), so clients must connect to :attr:`TcpProxy.host` (a ``10.x.y.2``
  address), not 127.0.0.1. Needs root; :func:`partition_supported` tells a test to skip.
* :meth:`TcpProxy.hang` / :meth:`TcpProxy.unhang`: the server *hangs* — what a stuck server, a
  stuck pooler or a half-dead path looks like. Connections stay open and new ones are accepted
  (the kernel acknowledges every byte), but nothing is forwarded either way: only the client's
  own deadlines end its wait. Unhung, the connections that lost bytes (out of step with the
  server) and those accepted meanwhile are closed; the others carry on.
* Triggers, for the in-doubt commit: :meth:`TcpProxy.cut_after` / :meth:`TcpProxy.partition_after`
  forward the chunk in which a pattern (``b"COMMIT"``) completes, then cut/partition — the
  server got the COMMIT, the client never gets the reply. :meth:`TcpProxy.cut_before` /
  :meth:`TcpProxy.partition_before` withhold that chunk instead. :attr:`TcpProxy.tripped` is set
  once the trigger has fired and its fault is in place.

The upstream connections to the real server are always made from the root namespace, so the
server sees an ordinary loopback client and is never touched.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from tests.support.netns import NetnsUnavailable, VethNamespace, netns_support

Direction = Literal["to_server", "to_client"]
_DIRECTIONS = ("to_server", "to_client")
_CHUNK = 65536
_TAIL = 4096  # bytes of each stream kept to find a pattern split across recv() chunks
_DRAIN_GRACE = 5.0  # seconds a tripped connection's far side may drain before it is closed


class PartitionUnsupported(RuntimeError):
    """A partition was asked for where it cannot be made (plain proxy, or no netns here)."""


def partition_supported() -> bool:
    """Whether ``TcpProxy(..., partitionable=True)`` works on this machine (root, iproute2,
    network namespaces). Probed once per process."""
    return netns_support()[0]


@dataclass(frozen=True)
class _Trigger:
    pattern: bytes
    direction: Direction
    action: Literal["cut", "partition"]
    when: Literal["before", "after"]


class _Link:
    """One proxied connection: the client's socket and ours to the server."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.closed = False
        self.doomed = False  # cut by a trigger: its far side drains, nothing more is forwarded
        self.lost = False  # bytes were dropped while the proxy hung: out of step for good
        self._lock = threading.Lock()

    def ends(self, direction: Direction) -> tuple[socket.socket, socket.socket]:
        """(source, sink) for bytes travelling ``direction``."""
        if direction == "to_server":
            return self.client, self.upstream
        return self.upstream, self.client

    def close(self) -> None:
        with self._lock:
            if self.closed:
                return
            self.closed = True
        for end in (self.client, self.upstream):
            with suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()


class TcpProxy:
    """Forwards connections made to :attr:`host`:\\ :attr:`port` to ``target_host:target_port``.

    ``partitionable=True`` puts the listener in its own network namespace so that
    :meth:`partition` can drop packets (raises :class:`PartitionUnsupported` where that is not
    possible). Use it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        partitionable: bool = False,
        connect_timeout: float = 5.0,
    ) -> None:
        self.target = (target_host, target_port)
        self.connect_timeout = connect_timeout
        self.tripped = threading.Event()
        self.bytes_forwarded: dict[str, int] = dict.fromkeys(_DIRECTIONS, 0)
        self.connections = 0  # connections accepted and joined to the server
        self._links: set[_Link] = set()
        self._lock = threading.Lock()
        self._gate = threading.Condition()  # pipes wait on it while partitioned
        self._partitioned = False
        self._cut = threading.Event()
        self._hung = threading.Event()
        self._held: list[socket.socket] = []  # accepted while hung, never joined to the server
        self._closed = threading.Event()
        self._trigger: _Trigger | None = None
        self._firing = 0  # triggers taken by a pipe and not yet carried out
        self._fired = threading.Condition(self._lock)  # notified when one has been
        self._tail = _TAIL
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self.namespace: VethNamespace | None = None
        if partitionable:
            ok, why = netns_support()
            if not ok:
                raise PartitionUnsupported(
                    f"a partitionable proxy needs network namespaces (root + iproute2): {why}"
                )
            try:
                self.namespace = VethNamespace()
            except NetnsUnavailable as error:
                raise PartitionUnsupported(str(error)) from error
        self.host = self.namespace.ns_ip if self.namespace else "127.0.0.1"
        try:
            self.port = 0
            self._listen()
        except BaseException:
            self.close()
            raise

    # -- addresses -------------------------------------------------------------------------

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) clients must connect to."""
        return self.host, self.port

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by the proxy's, e.g.
        ``postgresql://postgres@127.0.0.1:5432/test?x=1`` →
        ``postgresql://postgres@10.213.7.2:40123/test?x=1``. User, path and query are kept."""
        parts = urlsplit(url)
        userinfo, _, _ = parts.netloc.rpartition("@")
        netloc = f"{userinfo}@" if userinfo else ""
        return urlunsplit(parts._replace(netloc=f"{netloc}{self.host}:{self.port}"))

    # -- faults ----------------------------------------------------------------------------

    @property
    def is_cut(self) -> bool:
        return self._cut.is_set()

    @property
    def partitioned(self) -> bool:
        return self._partitioned

    def cut(self) -> None:
        """Drop every open connection and refuse new ones (the server is "down"): clients see
        EOF or a reset at once, new connections get ECONNREFUSED until :meth:`restore`."""
        self._cut.set()
        self._stop_listening()
        with self._lock:
            links = [link for link in self._links if not link.doomed]
        for link in links:
            self._drop(link)
        with self._gate:
            self._gate.notify_all()

    def restore(self) -> None:
        """Accept connections again, on the same port (after :meth:`cut` or a cut trigger)."""
        if self._closed.is_set() or not self._cut.is_set():
            return
        self._listen()
        self._cut.clear()

    @property
    def is_hung(self) -> bool:
        return self._hung.is_set()

    def hang(self) -> None:
        """The server stops answering without closing anything: open connections stay open
        and what either side sends is read and dropped; new connections are accepted and
        never answered (not even a server greeting). Until :meth:`unhang`."""
        self._hung.set()

    def unhang(self) -> None:
        """The server answers again. Connections that lost bytes while hung and those accepted
        meanwhile are closed (their clients see EOF); the others carry on as they were."""
        self._hung.clear()
        with self._lock:
            lost = [link for link in self._links if link.lost]
            held, self._held = self._held, []
        for link in lost:
            self._drop(link)
        for client in held:
            with suppress(OSError):
                client.shutdown(socket.SHUT_RDWR)
            client.close()

    def partition(self) -> None:
        """Drop packets both ways without closing anything: established connections hang
        until the client's own timeouts fire, new connections time out. Needs
        ``partitionable=True``."""
        namespace = self._require_namespace()
        with self._gate:
            if self._partitioned:
                return
            self._partitioned = True  # nothing more leaves the proxy, even before the link is down
        namespace.link_down()

    def heal(self) -> None:
        """End a :meth:`partition`: the link comes back, bytes the proxy held are forwarded and
        TCP retransmits what the kernel dropped (the same connections carry on)."""
        namespace = self._require_namespace()
        with self._gate:
            if not self._partitioned:
                return
        namespace.link_up()
        with self._gate:
            self._partitioned = False
            self._gate.notify_all()

    def _require_namespace(self) -> VethNamespace:
        if self.namespace is None:
            raise PartitionUnsupported(
                "a loopback proxy cannot drop packets (its kernel answers for it); "
                "create it with TcpProxy(host, port, partitionable=True)"
            )
        return self.namespace

    # -- triggers --------------------------------------------------------------------------

    def cut_after(self, pattern: bytes, direction: Direction = "to_server") -> threading.Event:
        """When ``pattern`` first shows up in the ``direction`` stream, forward the chunk it
        completes in, then :meth:`cut` (the COMMIT reached the server; its reply is lost).
        Returns :attr:`tripped` (cleared now, set once the cut is done)."""
        return self._arm(pattern, direction, "cut", "after")

    def cut_before(self, pattern: bytes, direction: Direction = "to_server") -> threading.Event:
        """Like :meth:`cut_after`, but the chunk with ``pattern`` is not forwarded."""
        return self._arm(pattern, direction, "cut", "before")

    def partition_after(
        self, pattern: bytes, direction: Direction = "to_server"
    ) -> threading.Event:
        """When ``pattern`` first shows up, forward the chunk it completes in, then
        :meth:`partition`. Whatever the far side answers is held (the reply to the COMMIT is
        "in the network") and delivered if and when :meth:`heal` is called while the client's
        connection is still alive."""
        self._require_namespace()
        return self._arm(pattern, direction, "partition", "after")

    def partition_before(
        self, pattern: bytes, direction: Direction = "to_server"
    ) -> threading.Event:
        """When ``pattern`` first shows up, :meth:`partition` before forwarding the chunk it
        completes in; the chunk is held and forwarded on :meth:`heal` (as TCP would
        retransmit it)."""
        self._require_namespace()
        return self._arm(pattern, direction, "partition", "before")

    def disarm(self, wait: float = 10.0) -> None:
        """Forget an armed trigger that has not fired, and wait (up to ``wait`` seconds) for
        one a pipe has already taken to be carried out: a :meth:`heal` or :meth:`restore`
        after this one then undoes it. (Without the wait, a trigger taken just before a mend
        partitioned the proxy just after it — for good: a run after the mend hung.)"""
        with self._fired:
            self._trigger = None
            self._fired.wait_for(lambda: self._firing == 0, timeout=wait)

    def _arm(
        self, pattern: bytes, direction: Direction, action: Literal["cut", "partition"], when: str
    ) -> threading.Event:
        if not isinstance(pattern, bytes) or not pattern:
            raise ValueError("pattern must be non-empty bytes")
        if direction not in _DIRECTIONS:
            raise ValueError(f"direction must be one of {_DIRECTIONS}, not {direction!r}")
        with self._lock:
            self._trigger = _Trigger(pattern, direction, action, when)  # type: ignore[arg-type]
            self._tail = max(_TAIL, len(pattern))
            self.tripped.clear()
        return self.tripped

    def _match(self, direction: Direction, tail: bytes, chunk: bytes) -> _Trigger | None:
        """The armed trigger if its pattern completes in ``chunk`` (disarming it), else None."""
        with self._lock:
            trigger = self._trigger
            if trigger is None or trigger.direction != direction:
                return None
            keep = len(trigger.pattern) - 1
            window = (tail[-keep:] if keep else b"") + chunk
            if trigger.pattern not in window:
                return None
            self._trigger = None
            self._firing += 1  # until _fire is done: disarm() waits for it
            return trigger

    # -- plumbing --------------------------------------------------------------------------

    def _make_listener(self) -> socket.socket:
        return socket.create_server((self.host, self.port))

    def _listen(self) -> None:
        deadline = time.monotonic() + 5
        while True:
            try:
                if self.namespace is not None:
                    listener = self.namespace.run(self._make_listener)
                else:
                    listener = self._make_listener()
                break
            except OSError as error:  # the old port can be briefly busy on restore
                if error.errno != errno.EADDRINUSE or not self.port:
                    raise
                if time.monotonic() > deadline:
                    raise RuntimeError(f"cannot listen on {self.host}:{self.port} again") from error
                time.sleep(0.05)
        self.port = int(listener.getsockname()[1])
        self._listener = listener
        self._acceptor = threading.Thread(
            target=self._accept, args=(listener,), name=f"tcp-proxy-{self.port}", daemon=True
        )
        self._acceptor.start()

    def _stop_listening(self) -> None:
        listener, self._listener = self._listener, None
        acceptor, self._acceptor = self._acceptor, None
        if listener is not None:
            with suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes the accept(); close() alone does not
            listener.close()
        if acceptor is not None and acceptor is not threading.current_thread():
            acceptor.join(timeout=5)

    def _accept(self, listener: socket.socket) -> None:
        while not self._closed.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            if self._cut.is_set():
                client.close()
                continue
            threading.Thread(target=self._join, args=(client,), daemon=True).start()

    def _join(self, client: socket.socket) -> None:
        with self._lock:
            if self._hung.is_set():  # accepted, never answered (unhang() closes it)
                self._held.append(client)
                return
        try:
            upstream = socket.create_connection(self.target, timeout=self.connect_timeout)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)  # create_connection leaves its timeout on recv() too
        for end in (client, upstream):
            with suppress(OSError):
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = _Link(client, upstream)
        with self._lock:
            if self._cut.is_set() or self._closed.is_set():
                link.close()
                return
            self._links.add(link)
            self.connections += 1
        for direction in _DIRECTIONS:
            threading.Thread(target=self._pipe, args=(link, direction), daemon=True).start()

    def _drop(self, link: _Link) -> None:
        link.close()
        with self._lock:
            self._links.discard(link)

    def _count(self, direction: Direction, size: int) -> None:
        with self._lock:
            self.bytes_forwarded[direction] += size

    def _hold_while_partitioned(self, link: _Link) -> None:
        with self._gate:
            while self._partitioned and not link.closed and not self._closed.is_set():
                self._gate.wait(0.5)
        if link.closed or self._closed.is_set():
            raise OSError(errno.ECONNABORTED, "proxy connection closed")

    def _forward(
        self, link: _Link, direction: Direction, sink: socket.socket, chunk: bytes
    ) -> None:
        self._hold_while_partitioned(link)
        sink.sendall(chunk)
        self._count(direction, len(chunk))

    def _pipe(self, link: _Link, direction: Direction) -> None:
        source, sink = link.ends(direction)
        tail = b""
        owner = True  # whether this pipe closes the link when it ends
        try:
            while chunk := source.recv(_CHUNK):
                if link.doomed:
                    continue  # a trigger cut this link; drain the far side until it closes
                if self._hung.is_set():
                    link.lost = True  # dropped: this connection is out of step for good
                    continue
                trigger = self._match(direction, tail, chunk)
                tail = (tail + chunk)[-self._tail :]
                if trigger is None:
                    self._forward(link, direction, sink, chunk)
                elif not self._fire(trigger, link, direction, chunk):
                    owner = False
                    return
        except OSError:
            pass
        finally:
            if owner:
                self._drop(link)

    def _fire(self, trigger: _Trigger, link: _Link, direction: Direction, chunk: bytes) -> bool:
        """Carry out a trigger found in ``chunk``; whether the pipe goes on reading."""
        try:
            going_on = self._carry_out(trigger, link, direction, chunk)
        finally:
            with self._fired:
                self._firing -= 1
                self._fired.notify_all()
        if trigger.action == "partition" and trigger.when == "before":
            self._forward(link, direction, link.ends(direction)[1], chunk)  # held until heal()
        return going_on

    def _carry_out(
        self, trigger: _Trigger, link: _Link, direction: Direction, chunk: bytes
    ) -> bool:
        source, sink = link.ends(direction)
        if trigger.action == "partition":
            namespace = self._require_namespace()
            with self._gate:
                self._partitioned = True  # from here on, nothing else leaves the proxy
            if trigger.when == "after":
                sink.sendall(chunk)
                self._count(direction, len(chunk))
            namespace.link_down()
            self.tripped.set()
            return True  # a chunk held back ("before") is forwarded by _fire, once it is done
        link.doomed = True  # before the chunk goes out: the answer to it must not come back
        if trigger.when == "after":
            sink.sendall(chunk)
            self._count(direction, len(chunk))
        # The sink gets a clean FIN behind everything forwarded (no RST that could discard
        # unsent bytes) and is drained by the other pipe, which closes the link at EOF; the
        # source side is shut now, so its peer sees the connection drop. Everything else is
        # cut (new connections refused) and ``tripped`` set before either end is touched, so
        # whoever notices the drop also finds the trigger fired.
        self.cut()
        self.tripped.set()
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        with suppress(OSError):
            source.shutdown(socket.SHUT_RDWR)
        timer = threading.Timer(_DRAIN_GRACE, self._drop, args=(link,))
        timer.daemon = True
        timer.start()
        return False

    def close(self) -> None:
        """Close everything: listener, connections, and the namespace and veth if any."""
        self._closed.set()
        self._cut.set()
        self._stop_listening()
        with self._lock:
            links = list(self._links)
            held, self._held = self._held, []
        for link in links:
            self._drop(link)
        for client in held:
            client.close()
        with self._gate:
            self._gate.notify_all()
        if self.namespace is not None:
            self.namespace.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PartitionProxy(TcpProxy):
    """``TcpProxy(host, port, partitionable=True)``."""

    def __init__(self, target_host: str, target_port: int, *, connect_timeout: float = 5.0):
        super().__init__(
            target_host, target_port, partitionable=True, connect_timeout=connect_timeout
        )


@contextmanager
def tcp_proxy(
    host: str, port: int, *, partitionable: bool = False, connect_timeout: float = 5.0
) -> Iterator[TcpProxy]:
    proxy = TcpProxy(host, port, partitionable=partitionable, connect_timeout=connect_timeout)
    try:
        yield proxy
    finally:
        proxy.close()
