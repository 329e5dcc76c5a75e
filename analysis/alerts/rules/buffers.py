"""Buffers and windows: K5 receive-buffer pressure, K13 zero window from the sender side
(anomalies.md 4). K4, the accept queue, is listen_overflow.py; K11, UDP drops, udp_drops.py.

Drops arrive as ``skb_drop`` records (packet orientation: ``src`` is the sender, so the
local endpoint of a received packet is ``dst:dport``), exact per-reason totals as
``drop_count`` deltas, socket-queue failures as ``sock_event`` records (probes
sock-rcvqueue-full, sock-exceed-buf-limit, udp-fail-queue). Windows come from siftr /
tcpdebug samples: ``rcv_wnd`` is what this host advertises, ``snd_wnd`` what the peer
advertised.

K5's drops are one finding per reason and reader (the local process; unattributed: the
local address and port), its members the connections that lost data while it was open.
A zero window held past ``zero_window_s`` is one finding per fix target (issue 34 item 1,
groups.py): K5 per local process (tgid; unattributed: the local address and port), the
reader that does not read; K13 per peer (address, port), the remote reader. Its members
are the target's sockets held at zero now; with one member the finding is that socket's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from translators.records import (
    Record,
    SiftrSample,
    SkbDrop,
    SockEvent,
    TcpDebugSnapshot,
    TcpStateChange,
)

from ..book import MAX_MEMBER_CONNS, Subject
from ..state import LruMap, Window, bounded_append
from .base import Context, Rule, endpoint, flow_key, host_subject, who
from .groups import Groups, callers, keep_subject

ENOMEM, ENOBUFS = 12, 105


def sock_probe(rec: SockEvent) -> str:
    """Normalise the socket-event probe name to one of rcvqueue-full, exceed-buf-limit, udp-fail-queue."""
    for name in ("rcvqueue-full", "exceed-buf-limit", "udp-fail-queue"):
        if name in rec.probe:
            return name
    return rec.probe


def _bounded_append(evidence: list[int], seq: int, cap: int = 32) -> None:
    if len(evidence) < cap:
        evidence.append(seq)


@dataclass(slots=True)
class _Drops:
    drops: Window
    evidence: list[int] | None = None


class ZeroWindowTracker:
    """How long a window field has stayed at zero per flow; the set of zero flows is small."""

    def __init__(self, cap: int) -> None:
        self.since: LruMap[object, tuple[float, Record, list[int]]] = LruMap(cap)

    def sample(
        self, rec: Record, window: int | None, about: Record | None = None
    ) -> tuple[float, Record, list[int]] | None:
        """A window value seen in ``rec``; ``about`` is the socket it describes when not rec's own."""
        if window is None:
            return None
        owner = about if about is not None else rec
        key = flow_key(owner)
        if window > 0:
            self.since.pop(key)
            return None
        entry = self.since.get_or_create(key, lambda: (rec.ts_wall, owner, []))
        _bounded_append(entry[2], rec.seq, 16)
        return entry

    def forget(self, rec: Record) -> None:
        self.since.pop(flow_key(rec))

    def held(self, ctx: Context, target: Target, now: float, limit: float) -> dict[object, list[Held]]:
        """The sockets at zero for ``limit`` or longer, oldest first, by fix target."""
        out: dict[object, list[Held]] = {}
        for since, first, evidence in self.since.values():
            if now - since >= limit:
                s = ctx.owner(first)
                out.setdefault(target(s), []).append(Held(since, s, evidence))
        for members in out.values():
            members.sort(key=lambda m: (m.since, m.evidence[:1]))  # oldest, then the first sampled
        return out


@dataclass(slots=True)
class Held:
    since: float
    subject: Subject
    evidence: list[int]


Target = Callable[[Subject], object]


def group_subject(members: list[Held], local: bool) -> Subject:
    """One member: its socket. More: the process while they share it, and the local
    (``local``) or remote endpoint."""
    first = members[0].subject
    if len(members) == 1:
        return first
    pids = {m.subject.tgid or m.subject.pid for m in members}
    one = len(pids) == 1 and None not in pids
    s = Subject(
        host_id=first.host_id, boot_id=first.boot_id, pid=first.tgid or first.pid if one else None,
        tgid=first.tgid or first.pid if one else None, comm=first.comm if one else None, netns=first.netns,
        proto=first.proto, ip_ver=first.ip_ver,
    )  # fmt: skip
    if local and len({(m.subject.src, m.subject.sport) for m in members}) == 1:
        s.src, s.sport = first.src, first.sport
    if not local:
        s.dst, s.dport = first.dst, first.dport
    return s


def fire_held(
    rule: Rule, store: LruMap[object, Subject], key: object, members: list[Held], subject: Subject, message: str,
    now: float,
) -> None:  # fmt: skip
    subject = keep_subject(store, (subject.host_id, key), subject)
    conns = [m.subject.conn_uuid for m in members[: 2 * MAX_MEMBER_CONNS]]
    evidence = [seq for m in members for seq in m.evidence][:32]
    rule.fire(
        "zero-window", key, now=now, severity="warning", subject=subject, message=message,
        clear_after=2 * rule.num("window_s"), metric=now - members[0].since, evidence=evidence, bump=False,
        members=len(members), member_conn_uuids=[c for c in conns if c is not None][:MAX_MEMBER_CONNS],
    )  # fmt: skip


class ReceiveBuffer(Rule):
    rule_id = "K5"
    kinds = ("skb_drop", "sock_event", "siftr_sample", "tcpdebug_snapshot", "tcp_state")
    FLOW_REASONS = {"TCP_ZEROWINDOW": "warning", "SOCKET_RCVBUFF": "warning", "SOCKET_BACKLOG": "warning",
                    "TCP_OFO_QUEUE_PRUNE": "notice", "TCP_OFOMERGE": "notice"}  # fmt: skip

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.flows = self.flows_map()
        self.zero = ZeroWindowTracker(ctx.max_flows)
        self.subjects: LruMap[object, Subject] = self.keys_map()  # per finding (groups.keep_subject)
        # local sockets by tuple: when both ends are traced (loopback, containers), the
        # sender's snd_wnd = 0 is this host's receiver advertising zero (anomalies.md K13)
        self.sockets: LruMap[tuple[object, ...], Record] = LruMap(ctx.max_flows)
        self.groups = Groups(self.rule_id, ctx.book, ctx.max_keys)  # drops: per reason and reader
        self.group_drops: LruMap[object, Window] = self.keys_map()

    def feed(self, rec: Record) -> None:
        if isinstance(rec, SkbDrop):
            if rec.l4_proto == "udp":
                return  # K11
            if rec.drop_reason_str in self.FLOW_REASONS:
                self._drop(rec, rec.drop_reason_str, self.FLOW_REASONS[rec.drop_reason_str])
            elif rec.drop_reason_str == "PROTO_MEM":
                self._host_pressure(rec, "PROTO_MEM drops")
        elif isinstance(rec, SockEvent):
            if rec.proto not in (None, "tcp"):
                return
            probe = sock_probe(rec)
            if probe == "rcvqueue-full":
                self._drop(rec, "sock_rcvqueue_full", "warning")
            elif probe == "exceed-buf-limit":
                self._host_pressure(rec, "sock_exceed_buf_limit (tcp_mem)")
        elif isinstance(rec, SiftrSample | TcpDebugSnapshot):
            self._window(rec)
        elif isinstance(rec, TcpStateChange) and rec.state != "ESTABLISHED":
            self.zero.forget(rec)

    def _drop(self, rec: Record, what: str, severity: str) -> None:
        w = self.window
        d = self.flows.get_or_create((flow_key(rec), what), lambda: _Drops(Window(w)))
        d.drops.add(rec.ts_wall)
        d.evidence = bounded_append(d.evidence, rec.seq, 32)
        n = int(d.drops.total(rec.ts_wall))
        subject = self.ctx.owner(rec)
        if what in ("TCP_OFO_QUEUE_PRUNE", "TCP_OFOMERGE"):
            why = "the out-of-order queue was trimmed for memory, so the peer must resend that data"
        else:
            why = "data already sent was thrown away because the receiving application does not read fast enough"
        # the receiving socket: a dropped packet's destination, a socket event's own (local first)
        local = (subject.src, subject.sport) if isinstance(rec, SockEvent) else (subject.dst, subject.dport)
        cond = what.lower().replace("_", "-")
        target = self._reader(subject) if subject.tgid or subject.pid else ("local", subject.netns, *local)
        g = self.groups.join(cond, target, subject, flow_key(rec), subject.conn_uuid, n, _reader_subject)
        total = self.group_drops.get_or_create((rec.host_id, cond, target), lambda: Window(w))
        total.add(rec.ts_wall)
        if g.total == 1:
            shown = keep_subject(self.subjects, (rec.host_id, cond, target), subject)
            message = (
                f"{n} {what} drop{'s' if n > 1 else ''} in {w:g} s on the connection "
                f"{endpoint(getattr(rec, 'src', None), getattr(rec, 'sport', None))} -> "
                f"{endpoint(getattr(rec, 'dst', None), getattr(rec, 'dport', None))} ({who(subject)}): {why}."
            )
        else:
            shown = keep_subject(self.subjects, (rec.host_id, cond, target), g.subject)
            n = int(total.total(rec.ts_wall))
            message = f"{n} {what} drops in {w:g} s on {callers(shown, g.total)}: {why}."
        self.fire(
            cond, target, now=rec.ts_wall, severity=severity, subject=shown, message=message,
            clear_after=2 * w, metric=float(n), evidence=d.evidence or (), members=g.total,
            member_conn_uuids=g.conns,
        )  # fmt: skip

    def _host_pressure(self, rec: Record, what: str) -> None:
        message = (
            f"TCP memory pressure on this host ({what}): the protocol-wide limit net.ipv4.tcp_mem was reached, "
            f"so every TCP socket on the host is losing or delaying data."
        )
        self.fire(
            "proto-mem", ("host",), now=rec.ts_wall, severity="critical", subject=host_subject(rec),
            message=message, clear_after=2 * self.window, evidence=[rec.seq],
        )  # fmt: skip

    def _window(self, rec: SiftrSample | TcpDebugSnapshot) -> None:
        self.sockets.get_or_create((rec.host_id, rec.netns, rec.src, rec.sport, rec.dst, rec.dport), lambda: rec)
        entry = self.zero.sample(rec, rec.rcv_wnd)
        if entry is not None:
            self._check_zero(entry, rec.ts_wall)
        receiver = self.sockets.peek((rec.host_id, rec.netns, rec.dst, rec.dport, rec.src, rec.sport))
        if receiver is not None:
            entry = self.zero.sample(rec, rec.snd_wnd, about=receiver)
            if entry is not None:
                self._check_zero(entry, rec.ts_wall)

    def tick(self, now: float) -> None:
        for key, members in self.zero.held(self.ctx, self._reader, now, self.num("zero_window_s")).items():
            self._fire_zero(key, members, now)

    @staticmethod
    def _reader(s: Subject) -> object:
        """The fix target: the process that does not read, else the local endpoint."""
        pid = s.tgid or s.pid
        return ("process", pid) if pid is not None else ("local", s.netns, s.src, s.sport)

    def _check_zero(self, entry: tuple[float, Record, list[int]], now: float) -> None:
        since, first, _ = entry
        if now - since < self.num("zero_window_s"):
            return
        key = self._reader(self.ctx.owner(first))
        self._fire_zero(key, self.zero.held(self.ctx, self._reader, now, self.num("zero_window_s"))[key], now)

    def _fire_zero(self, key: object, members: list[Held], now: float) -> None:
        n, oldest = len(members), members[0].subject
        held = now - members[0].since
        subject = group_subject(members, local=True)
        where = f"{endpoint(oldest.src, oldest.sport)} <- {endpoint(oldest.dst, oldest.dport)}"
        if n == 1:
            message = (
                f"This host has advertised a zero receive window for {held:.1f} s on {where}: {who(subject)} is "
                f"not reading its socket, so the sender is stalled."
            )
        else:
            reader = who(subject) if subject.comm else "their readers"
            message = (
                f"This host has advertised a zero receive window on {callers(subject, n)} for more than "
                f"{self.num('zero_window_s'):g} s, the longest {held:.1f} s (on {where}): {reader} "
                f"{'is' if subject.comm else 'are'} not reading, so their senders are stalled."
            )
        fire_held(self, self.subjects, key, members, subject, message, now)


def _reader_subject(s: Subject) -> Subject:
    """A drop finding's subject: the reading process and the namespace, no socket."""
    pid = s.tgid or s.pid
    return Subject(host_id=s.host_id, boot_id=s.boot_id, pid=pid, tgid=pid, comm=s.comm, netns=s.netns, proto="tcp")


class PeerZeroWindow(Rule):
    rule_id = "K13"
    kinds = ("siftr_sample", "tcpdebug_snapshot", "tcp_state")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.zero = ZeroWindowTracker(ctx.max_flows)
        self.subjects: LruMap[object, Subject] = self.keys_map()  # per finding (groups.keep_subject)

    def feed(self, rec: Record) -> None:
        if isinstance(rec, SiftrSample | TcpDebugSnapshot):
            entry = self.zero.sample(rec, rec.snd_wnd)
            if entry is not None:
                self._check(entry, rec.ts_wall)
        elif isinstance(rec, TcpStateChange) and rec.state != "ESTABLISHED":
            self.zero.forget(rec)

    def tick(self, now: float) -> None:
        for key, members in self.zero.held(self.ctx, self._peer, now, self.num("zero_window_s")).items():
            self._fire(key, members, now)

    @staticmethod
    def _peer(s: Subject) -> object:
        """The fix target: the remote reader, the peer's address and port."""
        return ("dest", s.dst, s.dport)

    def _check(self, entry: tuple[float, Record, list[int]], now: float) -> None:
        since, first, _ = entry
        if now - since < self.num("zero_window_s"):
            return
        key = self._peer(self.ctx.owner(first))
        self._fire(key, self.zero.held(self.ctx, self._peer, now, self.num("zero_window_s"))[key], now)

    def _fire(self, key: object, members: list[Held], now: float) -> None:
        n, held = len(members), now - members[0].since
        subject = group_subject(members, local=False)
        peer = endpoint(subject.dst, subject.dport)
        if n == 1:
            message = (
                f"The peer {peer} has advertised a zero window to {who(subject)} for {held:.1f} s: the remote "
                f"application is not reading, so this host cannot send and its data waits in the send buffer."
            )
        else:
            message = (
                f"The peer {peer} has advertised a zero window to {callers(subject, n)} for more than "
                f"{self.num('zero_window_s'):g} s, the longest {held:.1f} s: the remote application is not reading, "
                f"so this host cannot send and their data waits in the send buffers."
            )
        fire_held(self, self.subjects, key, members, subject, message, now)
