"""Buffers and windows: K5 receive-buffer pressure, K11 UDP drops, K13 zero window from
the sender side (anomalies.md 4). K4, the accept queue, is listen_overflow.py.

Drops arrive as ``skb_drop`` records (packet orientation: ``src`` is the sender, so the
local endpoint of a received packet is ``dst:dport``), exact per-reason totals as
``drop_count`` deltas, socket-queue failures as ``sock_event`` records (probes
sock-rcvqueue-full, sock-exceed-buf-limit, udp-fail-queue). Windows come from siftr /
tcpdebug samples: ``rcv_wnd`` is what this host advertises, ``snd_wnd`` what the peer
advertised.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translators.records import (
    FlowCounters,
    Record,
    SiftrSample,
    SkbDrop,
    SockEvent,
    TcpDebugSnapshot,
    TcpStateChange,
    UdpDatagram,
)

from ..book import Subject
from ..state import LruMap, Window, bounded_append
from .base import Context, Rule, endpoint, flow_key, host_subject, who

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
        # local sockets by tuple: when both ends are traced (loopback, containers), the
        # sender's snd_wnd = 0 is this host's receiver advertising zero (anomalies.md K13)
        self.sockets: LruMap[tuple[object, ...], Record] = LruMap(ctx.max_flows)

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
        message = (
            f"{n} {what} drop{'s' if n > 1 else ''} in {w:g} s on the connection "
            f"{endpoint(getattr(rec, 'src', None), getattr(rec, 'sport', None))} -> "
            f"{endpoint(getattr(rec, 'dst', None), getattr(rec, 'dport', None))} ({who(subject)}): {why}."
        )
        self.fire(
            what.lower().replace("_", "-"), flow_key(rec), now=rec.ts_wall, severity=severity, subject=subject,
            message=message, clear_after=2 * w, metric=float(n), evidence=d.evidence or (),
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
        for entry in list(self.zero.since.values()):
            self._check_zero(entry, now)

    def _check_zero(self, entry: tuple[float, Record, list[int]], now: float) -> None:
        since, first, evidence = entry
        held = now - since
        if held < self.num("zero_window_s"):
            return
        subject = self.ctx.owner(first)
        message = (
            f"This host has advertised a zero receive window for {held:.1f} s on "
            f"{endpoint(getattr(first, 'src', None), getattr(first, 'sport', None))} <- "
            f"{endpoint(getattr(first, 'dst', None), getattr(first, 'dport', None))}: {who(subject)} is not "
            f"reading its socket, so the sender is stalled."
        )
        self.fire(
            "zero-window", flow_key(first), now=now, severity="warning", subject=subject, message=message,
            clear_after=2 * self.window, metric=held, evidence=evidence, bump=False,
        )  # fmt: skip


class PeerZeroWindow(Rule):
    rule_id = "K13"
    kinds = ("siftr_sample", "tcpdebug_snapshot", "tcp_state")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.zero = ZeroWindowTracker(ctx.max_flows)

    def feed(self, rec: Record) -> None:
        if isinstance(rec, SiftrSample | TcpDebugSnapshot):
            entry = self.zero.sample(rec, rec.snd_wnd)
            if entry is not None:
                self._check(entry, rec.ts_wall)
        elif isinstance(rec, TcpStateChange) and rec.state != "ESTABLISHED":
            self.zero.forget(rec)

    def tick(self, now: float) -> None:
        for entry in list(self.zero.since.values()):
            self._check(entry, now)

    def _check(self, entry: tuple[float, Record, list[int]], now: float) -> None:
        since, first, evidence = entry
        held = now - since
        if held < self.num("zero_window_s"):
            return
        subject = self.ctx.owner(first)
        peer = endpoint(getattr(first, "dst", None), getattr(first, "dport", None))
        message = (
            f"The peer {peer} has advertised a zero window to {who(subject)} for {held:.1f} s: the remote "
            f"application is not reading, so this host cannot send and its data waits in the send buffer."
        )
        self.fire(
            "zero-window", flow_key(first), now=now, severity="warning", subject=subject, message=message,
            clear_after=2 * self.window, metric=held, evidence=evidence, bump=False,
        )  # fmt: skip


@dataclass(slots=True)
class _UdpPort:
    skb_drops: Window
    sock_drops: Window
    received: Window
    evidence: list[int] = field(default_factory=list)
    # every drop, from each source: one datagram can be both an skb drop and a socket
    # event, so the alert counts the larger source's drops, never the sum (issue 34
    # counted 9,980 for 4,990 drops)
    skb_total: int = 0
    sock_total: int = 0


class UdpDrops(Rule):
    rule_id = "K11"
    kinds = ("skb_drop", "sock_event", "udp_datagram", "flow_counters")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.ports = self.keys_map()
        self.minute = self.keys_map()
        self.counters: LruMap[object, tuple[int, float]] = LruMap(ctx.max_flows)  # packets_in, when

    def _port(self, rec: Record, addr: str | None, port: int | None) -> _UdpPort:
        w = self.window
        return self.ports.get_or_create(  # type: ignore[no-any-return]
            (rec.host_id, addr, port), lambda: _UdpPort(Window(w), Window(w), Window(w))
        )

    def feed(self, rec: Record) -> None:
        if isinstance(rec, UdpDatagram):
            if rec.probe == "receive":
                self._port(rec, rec.dst, rec.dport).received.add(rec.ts_wall, rec.gso_segs or 1)
        elif isinstance(rec, FlowCounters):
            if rec.proto == "udp":
                self._counters(rec)
        elif isinstance(rec, SkbDrop):
            self._skb(rec)
        elif isinstance(rec, SockEvent) and rec.proto == "udp":
            self._sock(rec)

    def _counters(self, rec: FlowCounters) -> None:
        key = flow_key(rec)
        prev = self.counters.peek(key)
        self.counters.put(key, (rec.packets_in, rec.ts_wall))
        if prev is None:
            return  # the first report: a baseline
        if self.ctx.sampling.new_session_since(rec.host_id, prev[1]):
            got = rec.packets_in  # the udp_flows map of a new collector session counts from zero
        else:
            got = rec.packets_in - prev[0]
        if got > 0:
            self._port(rec, rec.src, rec.sport).received.add(rec.ts_wall, got)

    def _skb(self, rec: SkbDrop) -> None:
        reason = rec.drop_reason_str
        if reason == "PROTO_MEM" and rec.l4_proto == "udp":
            self._proto_mem(rec)
        if rec.l4_proto != "udp":
            return
        if reason == "SOCKET_RCVBUFF":
            p = self._port(rec, rec.dst, rec.dport)
            p.skb_drops.add(rec.ts_wall)
            p.skb_total += 1
            _bounded_append(p.evidence, rec.seq)
            self._check_rcvbuf(rec, rec.dst, rec.dport, p, p.skb_total > p.sock_total)
        elif reason == "NO_SOCKET":
            self._per_minute(rec, "no-socket", (rec.dst, rec.dport), "no_socket_per_min")
        elif reason == "UDP_CSUM":
            self._per_minute(rec, "checksum", (rec.src,), "csum_per_min")

    def _sock(self, rec: SockEvent) -> None:
        probe = sock_probe(rec)
        if probe == "exceed-buf-limit" or (probe == "udp-fail-queue" and rec.rc == -ENOBUFS):
            self._proto_mem(rec)
        elif probe == "rcvqueue-full" or (probe == "udp-fail-queue" and rec.rc in (None, -ENOMEM)):
            # socket events are local-first; the same datagram may also come as an skb
            # drop, so the two sources are counted apart and the larger one is used
            p = self._port(rec, rec.src, rec.sport)
            p.sock_drops.add(rec.ts_wall)
            p.sock_total += 1
            _bounded_append(p.evidence, rec.seq)
            self._check_rcvbuf(rec, rec.src, rec.sport, p, p.sock_total > p.skb_total)

    def _check_rcvbuf(self, rec: Record, addr: str | None, port: int | None, p: _UdpPort, new: bool) -> None:
        """``new``: this drop raised the larger source's total, so it is one more datagram lost
        (not the other source's view of a datagram already counted)."""
        t = rec.ts_wall
        drops = max(p.skb_drops.total(t), p.sock_drops.total(t))
        received = p.received.total(t)
        share = drops / (received + drops)
        rate = drops / self.window
        if share <= self.num("rcvbuf_share") and rate <= self.num("rcvbuf_rate"):
            return
        subject = self.ctx.owner(rec, "udp")
        subject.conn_uuid = subject.sock_cookie = None
        subject.src, subject.sport, subject.dst, subject.dport = addr, port, None, None
        message = (
            f"UDP port {endpoint(addr, port)}"
            + (f" ({who(subject)})" if subject.comm else "")
            + f" dropped {int(drops)} datagrams in {self.window:g} s because its receive buffer was full "
            f"({share:.1%} of {int(received + drops)} arriving): UDP has no retransmission, so this is application "
            f"data lost. Read faster, or raise SO_RCVBUF / net.core.rmem_max."
        )
        self.fire(
            "rcvbuf", ("port", addr, port), now=t, severity="warning", subject=subject, message=message,
            clear_after=2 * self.window, metric=share, evidence=p.evidence, bump=new,
        )  # fmt: skip

    def _per_minute(self, rec: SkbDrop, cond: str, key: tuple[object, ...], limit_name: str) -> None:
        d = self.minute.get_or_create((rec.host_id, cond, *key), lambda: _Drops(Window(60)))
        d.drops.add(rec.ts_wall)
        d.evidence = bounded_append(d.evidence, rec.seq, 32)
        n = d.drops.total(rec.ts_wall)
        if n <= self.num(limit_name):
            return
        subject = Subject(host_id=rec.host_id, boot_id=rec.boot_id, netns=rec.netns, proto="udp")
        if cond == "no-socket":
            subject.dst, subject.dport = rec.dst, rec.dport
            message = (
                f"{int(n)} UDP datagrams in the last minute went to {endpoint(rec.dst, rec.dport)} where no socket "
                f"is bound (NO_SOCKET): stale clients still sending, or a scan if spread over many ports."
            )
        else:
            subject.src = rec.src
            message = (
                f"{int(n)} UDP datagrams from {rec.src} failed their checksum in the last minute: corruption on "
                f"the path or NIC checksum-offload trouble."
            )
        self.fire(
            cond, key, now=rec.ts_wall, severity="notice", subject=subject, message=message, clear_after=120.0,
            metric=n, evidence=d.evidence or (),
        )  # fmt: skip

    def _proto_mem(self, rec: Record) -> None:
        message = (
            "UDP memory pressure on this host (net.ipv4.udp_mem reached): datagrams are dropped on every UDP "
            "socket of the host, not only on a busy one."
        )
        subject = host_subject(rec)
        subject.proto = "udp"
        self.fire(
            "proto-mem", ("host",), now=rec.ts_wall, severity="critical", subject=subject, message=message,
            clear_after=2 * self.window, evidence=[rec.seq],
        )  # fmt: skip
