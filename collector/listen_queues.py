"""The listeners whose accept queue is full, read from the kernel when a namespace's
ListenOverflows moved (collector/stack_counters.py asks): a ``sock_event`` record with probe
``listen-overflow`` per full listener, naming it (address, port, socket cookie), its owner
(process id and command) and its numbers (``queue``: connections waiting for accept(),
``backlog``: the listen() backlog in force, as `ss -ltn` shows them as Recv-Q and Send-Q).

The numbers come from sock_diag (NETLINK_SOCK_DIAG, inet_diag): for a LISTEN socket
``idiag_rqueue`` is the accept queue's length and ``idiag_wqueue`` its limit. A netlink
socket answers for the namespace it was made in, so it is made inside the namespace
(collector/netns.py's entered(), on the reading thread) and used from home. "Full" is the
kernel's own test (sk_acceptq_is_full: more waiting than the backlog), the state in which
each SYN or handshake-completing ACK to the listener is dropped and counted in
ListenOverflows and ListenDrops.

The owner is the process holding the socket: its inode is looked up among the open files
of the namespace's processes first, then of every process (a socket made by a thread that
entered the namespace belongs to a process outside it). Found owners are cached by inode.
Keep in sync with: the K4 and K8 rules (analysis/alerts/rules/listen_overflow.py),
docs/alerts.md, docs/collector.md "Stack counters".
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

from collector import netns
from translators.kernel import KernelEnv, KernelRecord, collector_envelope
from translators.records import SockEvent, connection_uuid

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
TCP_LISTEN = 10
PROBE = "listen-overflow"
QUEUE_PROBE = "listen-queue"  # a listener's queue or backlog changed (or it was first seen)
HOOK = "sock_diag/inet_diag"

_NLMSG = struct.Struct("=IHHII")
_REQ = struct.Struct("=BBBxI")  # family, protocol, ext, pad, states; then the 48-byte sockid
_SOCKID = struct.Struct("!HH16s16s")  # sport, dport (network order), src, dst; then if, cookie
_MSG = struct.Struct("=BBBB")  # family, state, timer, retrans
_TAIL = struct.Struct("=IIIII")  # expires, rqueue, wqueue, uid, inode
_COOKIE = struct.Struct("=II")
MAX_OWNERS = 4096


@dataclass(frozen=True, slots=True)
class Listener:
    family: int
    addr: str
    port: int
    queue: int  # idiag_rqueue: connections waiting for accept()
    backlog: int  # idiag_wqueue: the listen() backlog in force
    inode: int
    cookie: int

    @property
    def full(self) -> bool:
        return self.queue > self.backlog


def _request(family: int, seq: int) -> bytes:
    body = _REQ.pack(family, socket.IPPROTO_TCP, 0, 1 << TCP_LISTEN) + bytes(48)
    return _NLMSG.pack(_NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def _parse(payload: bytes) -> Listener:
    family, _state, _timer, _retrans = _MSG.unpack_from(payload, 0)
    sport, _dport, src, _dst = _SOCKID.unpack_from(payload, 4)
    _ifindex = struct.unpack_from("=I", payload, 4 + _SOCKID.size)
    lo, hi = _COOKIE.unpack_from(payload, 4 + _SOCKID.size + 4)
    _expires, rqueue, wqueue, _uid, inode = _TAIL.unpack_from(payload, 4 + 48)
    addr = socket.inet_ntop(family, src[:4] if family == socket.AF_INET else src)
    return Listener(family, addr, sport, rqueue, wqueue, inode, lo | hi << 32)


def dump(sock: socket.socket) -> list[Listener]:
    """Every TCP LISTEN socket (IPv4, then IPv6) of the namespace `sock` was made in."""
    out: list[Listener] = []
    for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), 1):
        sock.send(_request(family, seq))
        done = False
        while not done:
            data = sock.recv(1 << 16)
            at = 0
            while at + _NLMSG.size <= len(data):
                length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, at)
                if length < _NLMSG.size:
                    done = True
                    break
                if kind == NLMSG_DONE:
                    done = True
                elif kind == NLMSG_ERROR:
                    (err,) = struct.unpack_from("=i", data, at + _NLMSG.size)
                    if err:
                        raise OSError(-err, os.strerror(-err))
                    done = True
                elif kind == SOCK_DIAG_BY_FAMILY:
                    out.append(_parse(data[at + _NLMSG.size : at + length]))
                at += (length + 3) & ~3
    return out


def listeners_in(ns: netns.Netns) -> list[Listener] | None:
    """The namespace's listeners; None when it is gone or cannot be entered."""
    try:
        with netns.entered(ns.path, ns.inode) as inside:
            if not inside:
                return None
            sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG)
    except OSError:
        return None
    with sock:
        sock.settimeout(1.0)
        try:
            return dump(sock)
        except OSError:
            return None


class Owners:
    """Socket inode -> (process id, command) of the process holding it open."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self.cache: dict[int, tuple[int, str]] = {}

    def find(self, inode: int, first: tuple[int, ...]) -> tuple[int, str] | None:
        if inode in self.cache:
            return self.cache[inode]
        link = f"socket:[{inode}]"
        others = (int(p) for p in _listdir(self.proc) if p.isdigit())
        for pid in (*first, *others):
            if self._holds(pid, link):
                comm = _read(f"{self.proc}/{pid}/comm")
                if comm is None:
                    continue
                if len(self.cache) >= MAX_OWNERS:
                    self.cache.clear()
                self.cache[inode] = (pid, comm.strip())
                return self.cache[inode]
        return None

    def _holds(self, pid: int, link: str) -> bool:
        fds = f"{self.proc}/{pid}/fd"
        for fd in _listdir(fds):
            try:
                if os.readlink(f"{fds}/{fd}") == link:
                    return True
            except OSError:
                continue
        return False


WILDCARDS = ("0.0.0.0", "::")


def filter_for(port: int = 0, addr: str | None = None, owner_filtered: bool = False) -> Callable[[Listener], bool]:
    """The listeners `--filter port=,addr=` lets through (a wildcard listener takes any
    local address); with a pid or cgroup filter none: the listen-queue records name no owner."""

    def keep(lst: Listener) -> bool:
        if owner_filtered:
            return False
        if port and lst.port != port:
            return False
        return not addr or lst.addr == addr or lst.addr in WILDCARDS

    return keep


class ListenQueues:
    """The ``listen-overflow`` records of one namespace's full listeners, and the
    ``listen-queue`` records of its listeners whose queue or backlog changed since the
    previous poll (issue 34 item 6: a LISTEN row shows its queue as `ss -ltn` does)."""

    def __init__(self, proc: str = "/proc") -> None:
        self.owners = Owners(proc)
        # netns inode -> socket cookie -> (queue, backlog) at the last poll
        self.last: dict[int, dict[int, tuple[int, int]]] = {}

    def records(self, env: KernelEnv, ts_ns: int, ns: netns.Netns) -> list[KernelRecord]:
        return [self._record(env, ts_ns, ns, lst, PROBE) for lst in listeners_in(ns) or () if lst.full]

    def changed(
        self, env: KernelEnv, ts_ns: int, ns: netns.Netns, keep: Callable[[Listener], bool] | None = None
    ) -> list[KernelRecord]:
        """A ``listen-queue`` record per listener first seen or whose queue or backlog
        moved since the last call for this namespace (none while they hold still); keep:
        the listeners the collector's filters let through (filter_for)."""
        found = listeners_in(ns)
        if found is None:
            self.last.pop(ns.inode, None)
            return []
        before = self.last.get(ns.inode, {})
        now = {lst.cookie: (lst.queue, lst.backlog) for lst in found if lst.cookie}
        self.last[ns.inode] = now
        # no owner look-up (a scan of /proc per new socket inode): the LISTEN row is the
        # socket's own connection (conn_uuid), which names its process already
        return [
            self._record(env, ts_ns, ns, lst, QUEUE_PROBE, owner=False)
            for lst in found
            if lst.cookie and before.get(lst.cookie) != (lst.queue, lst.backlog) and (keep is None or keep(lst))
        ]

    def forget(self, inode: int) -> None:
        self.last.pop(inode, None)

    def _record(
        self, env: KernelEnv, ts_ns: int, ns: netns.Netns, lst: Listener, probe: str, owner: bool = True
    ) -> KernelRecord:
        found = self.owners.find(lst.inode, ns.pids) if owner else None
        pid, comm = found if found is not None else (None, None)
        return SockEvent(
            **collector_envelope(env, probe, HOOK, "linux", ts_ns),
            netns=ns.inode,
            pid=pid,
            tgid=pid,
            comm=comm,
            ctx="task",
            sock_cookie=lst.cookie or None,
            conn_uuid=connection_uuid(env.host_id, env.boot_id, lst.cookie) if lst.cookie else None,
            ip_ver=4 if lst.family == socket.AF_INET else 6,
            src=lst.addr,
            sport=lst.port,
            proto="tcp",
            queue=lst.queue,
            backlog=lst.backlog,
        )  # fmt: skip


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None
