"""A throw-away network namespace joined to the root namespace by a veth pair, so a test can
cut the wire: with the namespace's end of the pair down, packets between the two namespaces
are dropped silently (no RST, no FIN, no ICMP) — a real network partition as a client in the
root namespace sees it, without touching any server the machine shares.

Layout of one :class:`VethNamespace` (names and the /30 are unique per instance)::

    root namespace                          namespace ``tkp-<pid>-<token>``
    tkp<token>a  10.x.y.1/30  <-- veth -->  tkp<token>b  10.x.y.2/30

Both ends carry static MAC addresses and *permanent* neighbour entries for each other, so no
ARP runs: while the link is down the kernel neither flushes a neighbour nor reports "host
unreachable" to a socket — packets just vanish, as on a broken switch.

Needs root and iproute2 (``ip``); :func:`netns_supported` says whether they are there.
Everything created is removed by :meth:`VethNamespace.close`, by a finalizer at interpreter
exit, and — for a process killed before either ran — by :func:`sweep_stale` (run before every
creation), which removes leftovers whose creating process is gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import ipaddress
import os
import random
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

CLONE_NEWNET = 0x40000000
PREFIX = "tkp"
_NS_NAME = re.compile(rf"^{PREFIX}-(\d+)-([0-9a-f]{{8}})$")
_VETH_NAME = re.compile(rf"^{PREFIX}([0-9a-f]{{8}})[ab]$")
_NETNS_DIR = "/var/run/netns"
_LOCK_PATH = os.path.join(
    "/run/lock" if os.path.isdir("/run/lock") else tempfile.gettempdir(), "threadkeeper-netns.lock"
)
_local_lock = threading.Lock()  # flock is per open file; this serialises threads of one process


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be used here (not root, no ``ip``, or the kernel refuses)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    ip = shutil.which("ip")
    if ip is None:
        raise NetnsUnavailable("iproute2 (`ip`) is not installed")
    done = subprocess.run([ip, *args], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise NetnsUnavailable(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    """Serialise namespace set-up and sweeping across threads and processes of this machine."""
    with _local_lock, open(_LOCK_PATH, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _namespaces() -> list[str]:
    done = _ip("netns", "list", check=False)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _links() -> list[str]:
    done = _ip("-o", "link", "show", check=False)
    names = []
    for line in done.stdout.splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def _destroy(name: str, root_if: str) -> None:
    """Remove one namespace and its veth (deleting one end of a pair deletes both). Deleting the
    link explicitly matters: a socket still open inside the namespace keeps the namespace alive
    after ``ip netns del``, and with it the pair."""
    with contextlib.suppress(NetnsUnavailable, OSError, subprocess.SubprocessError):
        _ip("link", "del", "dev", root_if, check=False)
        _ip("netns", "del", name, check=False)


def sweep_stale() -> list[str]:
    """Remove namespaces (and veths) of this module whose creating process has exited; returns
    the names removed. Live processes' namespaces are left alone."""
    removed = []
    with _machine_lock():
        live_tokens = set()
        for name in _namespaces():
            match = _NS_NAME.match(name)
            if not match:
                continue
            pid, token = int(match.group(1)), match.group(2)
            if _alive(pid):
                live_tokens.add(token)
                continue
            _destroy(name, f"{PREFIX}{token}a")
            removed.append(name)
        for link in _links():
            match = _VETH_NAME.match(link)
            if match and match.group(1) not in live_tokens:
                _ip("link", "del", "dev", link, check=False)
                removed.append(link)
    return removed


def _networks_in_use() -> list[ipaddress.IPv4Network]:
    used = []
    for args in (("-o", "-4", "addr", "show"), ("-4", "route", "show", "table", "all")):
        for word in _ip(*args, check=False).stdout.split():
            with contextlib.suppress(ValueError):
                if "/" in word or re.fullmatch(r"\d+\.\d+\.\d+\.\d+", word):
                    used.append(ipaddress.ip_network(word, strict=False))
    return [net for net in used if isinstance(net, ipaddress.IPv4Network)]


def _free_subnet() -> ipaddress.IPv4Network:
    used = _networks_in_use()
    for _ in range(1000):
        second, third = random.randint(200, 254), random.randint(0, 255)
        candidate = ipaddress.IPv4Network(
            (f"10.{second}.{third}.{random.randrange(0, 256, 4)}", 30)
        )
        if not any(candidate.overlaps(net) for net in used if net.prefixlen > 0):
            return candidate
    raise NetnsUnavailable("no free 10.200-254.x.y/30 subnet")


def _mac(token: str, side: int) -> str:
    raw = bytes.fromhex(token) + bytes([side])
    return "02:" + ":".join(f"{b:02x}" for b in raw)


def _libc_setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"setns: {os.strerror(code)}")


def run_in_netns(name: str, fn: Callable[[], T]) -> T:
    """Call ``fn`` on a fresh thread that has joined network namespace ``name`` and return its
    result (or raise its exception). Sockets ``fn`` creates belong to that namespace for their
    whole life, whichever thread later uses them. The thread goes back to its own namespace
    afterwards and then ends, so no other thread is ever affected."""
    outcome: dict[str, object] = {}

    def target() -> None:
        own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
        try:
            there = os.open(os.path.join(_NETNS_DIR, name), os.O_RDONLY)
            try:
                _libc_setns(there)
            finally:
                os.close(there)
            try:
                outcome["value"] = fn()
            except BaseException as error:
                outcome["error"] = error
            finally:
                _libc_setns(own)
        except BaseException as error:
            outcome.setdefault("error", error)
        finally:
            os.close(own)

    thread = threading.Thread(target=target, name=f"netns-{name}", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


class VethNamespace:
    """A new network namespace with a veth pair to the root namespace (see the module doc).

    ``root_ip`` is the root side's address, ``ns_ip`` the namespace side's: something listening
    inside the namespace (create it with :meth:`run`) is reached from the root namespace at
    ``ns_ip``. :meth:`link_down` partitions the two, :meth:`link_up` heals."""

    def __init__(self) -> None:
        if os.geteuid() != 0:
            raise NetnsUnavailable("network namespaces need root")
        if shutil.which("ip") is None:
            raise NetnsUnavailable("iproute2 (`ip`) is not installed")
        sweep_stale()
        token = secrets.token_hex(4)
        self._token = token
        self.name = f"{PREFIX}-{os.getpid()}-{token}"
        self.root_if = f"{PREFIX}{token}a"
        self.ns_if = f"{PREFIX}{token}b"
        self._lock = threading.Lock()
        self._closed = False
        self._up = True
        self._finalizer = weakref.finalize(self, _destroy, self.name, self.root_if)
        try:
            with _machine_lock():
                subnet = _free_subnet()
                root_ip, ns_ip = (str(host) for host in subnet.hosts())
                self.root_ip, self.ns_ip = root_ip, ns_ip
                self.subnet = subnet
                root_mac, ns_mac = _mac(token, 0xA), _mac(token, 0xB)
                _ip("netns", "add", self.name)
                _ip("link", "add", self.root_if, "address", root_mac, "type", "veth", "peer",
                    "name", self.ns_if, "address", ns_mac, "netns", self.name)  # fmt: skip
                _ip("addr", "add", f"{root_ip}/30", "dev", self.root_if)
                _ip("link", "set", "dev", self.root_if, "up")
                _ip("neigh", "replace", ns_ip, "lladdr", ns_mac, "dev", self.root_if,
                    "nud", "permanent")  # fmt: skip
                inside = ("-n", self.name)
                _ip(*inside, "link", "set", "dev", "lo", "up")
                _ip(*inside, "addr", "add", f"{ns_ip}/30", "dev", self.ns_if)
                _ip(*inside, "link", "set", "dev", self.ns_if, "up")
                _ip(*inside, "neigh", "replace", root_ip, "lladdr", root_mac, "dev", self.ns_if,
                    "nud", "permanent")  # fmt: skip
        except BaseException:
            self._finalizer()
            raise

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` run inside the namespace (see :func:`run_in_netns`)."""
        return run_in_netns(self.name, fn)

    @property
    def is_up(self) -> bool:
        return self._up

    def link_down(self) -> None:
        """Partition: the namespace's end goes down; packets both ways are dropped silently."""
        with self._lock:
            self._check_open()
            _ip("-n", self.name, "link", "set", "dev", self.ns_if, "down")
            self._up = False

    def link_up(self) -> None:
        """Heal: the namespace's end comes back (its address and neighbour entry are kept)."""
        with self._lock:
            self._check_open()
            _ip("-n", self.name, "link", "set", "dev", self.ns_if, "up")
            # Taking a link down flushes its neighbours, permanent ones too (the root side only
            # lost its carrier and keeps its entry): put the namespace side's back.
            _ip("-n", self.name, "neigh", "replace", self.root_ip, "lladdr",
                _mac(self._token, 0xA), "dev", self.ns_if, "nud", "permanent")  # fmt: skip
            self._up = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"namespace {self.name} is closed")

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Delete the veth pair and the namespace (idempotent). Close sockets made inside first:
        an open socket keeps the (then nameless) namespace alive until it is closed."""
        with self._lock:
            self._closed = True
        self._finalizer()

    def __enter__(self) -> VethNamespace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_support: tuple[bool, str] | None = None
_support_lock = threading.Lock()


def netns_support() -> tuple[bool, str]:
    """(whether :class:`VethNamespace` works here, why not). Probed once by really building one
    and opening a socket inside it; cached for the process."""
    global _support
    with _support_lock:
        if _support is None:
            try:
                with VethNamespace() as probe:
                    probe.run(lambda: os.close(os.open("/proc/self/ns/net", os.O_RDONLY)))
                _support = (True, "")
            except (NetnsUnavailable, OSError, subprocess.SubprocessError) as error:
                reason = str(error)
                if isinstance(error, OSError) and error.errno == errno.EPERM:
                    reason = f"not permitted: {error}"
                _support = (False, reason)
        return _support


def netns_supported() -> bool:
    return netns_support()[0]
