"""K11 UDP drops (anomalies.md 4): receive-buffer overflow per socket, with the socket, its
buffer and its reader's pace (issue 34 item 2); datagrams to no socket, bad checksums and
UDP memory pressure.

A port's datagrams, each kind of record counted apart (two views of one datagram are never
added, issue 34 counted 9,980 for 4,990 drops):
- arrived: ``udp_datagram`` receive records at the device (netif_receive_skb) and the
  ``flow_counters`` packets_in deltas of the udp_flows map, dropped datagrams included; the
  larger of the two;
- read: receive records of the application's calls (sock_recv_length, recv* system calls,
  udp_recvmsg; local side first), one datagram each: the reader's pace, what the kernel
  counts in UdpInDatagrams;
- dropped: ``skb_drop`` SOCKET_RCVBUFF and ``sock_event`` rcvqueue-full / udp-fail-queue
  (ENOMEM), the larger of the two: UdpRcvbufErrors; the socket events carry the buffer's
  size (sk_rcvbuf), its memory in use and the dropped datagram's truesize.
Receive records of no known hook (captures, older streams) are datagrams delivered: then
arrived = them + dropped. Keep in sync with docs/alerts.md (K11).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translators.records import FlowCounters, Record, SkbDrop, SockEvent, UdpDatagram

from ..book import Subject
from ..state import LruMap, Window, bounded_append
from .base import Context, Rule, endpoint, flow_key, host_subject, who
from .buffers import ENOBUFS, ENOMEM, sock_probe

DEVICE_HOOK = "tp_btf/netif_receive_skb"


@dataclass(slots=True)
class _Drops:
    drops: Window
    evidence: list[int] | None = None


@dataclass(slots=True)
class _UdpPort:
    skb_drops: Window
    sock_drops: Window
    arrived: Window  # at the device
    counted: Window  # udp_flows packets_in deltas
    delivered: Window  # receive records of no known hook
    read: Window  # the application's receive calls
    evidence: list[int] = field(default_factory=list)
    skb_total: int = 0
    sock_total: int = 0
    reads_seen: bool = False
    rcvbuf: int | None = None
    rmem_alloc: int | None = None
    truesize: int | None = None
    socket: Record | None = None  # the last socket event: the socket and its owner
    fired: bool = False


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
            (rec.host_id, addr, port),
            lambda: _UdpPort(Window(w), Window(w), Window(w), Window(w), Window(w), Window(w)),
        )

    def feed(self, rec: Record) -> None:
        if isinstance(rec, UdpDatagram):
            if rec.probe == "receive":
                self._received(rec)
        elif isinstance(rec, FlowCounters):
            if rec.proto == "udp":
                self._counters(rec)
        elif isinstance(rec, SkbDrop):
            self._skb(rec)
        elif isinstance(rec, SockEvent) and rec.proto == "udp":
            self._sock(rec)

    def _received(self, rec: UdpDatagram) -> None:
        n = rec.gso_segs or 1
        if rec.hook and rec.hook != DEVICE_HOOK:  # a receive call: local side first
            addr, port = rec.src, rec.sport
            p = self._port(rec, addr, port)
            p.read.add(rec.ts_wall, 1)
            p.reads_seen = True
        else:  # a datagram, source first
            addr, port = rec.dst, rec.dport
            p = self._port(rec, addr, port)
            (p.arrived if rec.hook else p.delivered).add(rec.ts_wall, n)
        if p.fired:
            self._check_rcvbuf(rec, addr, port, p, False)  # the finding's numbers stay current

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
            self._port(rec, rec.src, rec.sport).counted.add(rec.ts_wall, got)

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
            bounded_append(p.evidence, rec.seq, 32)
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
            bounded_append(p.evidence, rec.seq, 32)
            p.rcvbuf = rec.rcvbuf if rec.rcvbuf is not None else p.rcvbuf
            p.rmem_alloc, p.truesize, p.socket = rec.rmem_alloc, rec.truesize, rec
            self._check_rcvbuf(rec, rec.src, rec.sport, p, p.sock_total > p.skb_total)

    def _check_rcvbuf(self, rec: Record, addr: str | None, port: int | None, p: _UdpPort, new: bool) -> None:
        """``new``: this drop raised the larger source's total, so it is one more datagram lost
        (not the other source's view of a datagram already counted)."""
        t, w = rec.ts_wall, self.window
        drops = int(max(p.skb_drops.total(t), p.sock_drops.total(t)))
        if drops <= 0:
            return
        arrived = int(max(p.arrived.total(t), p.counted.total(t), p.delivered.total(t) + drops))
        share = drops / arrived
        if share <= self.num("rcvbuf_share") and drops / w <= self.num("rcvbuf_rate"):
            return
        p.fired = True
        subject = self.ctx.owner(p.socket or rec, "udp")
        subject.sock_cookie = None if p.socket is None else subject.sock_cookie
        subject.conn_uuid = None if p.socket is None else subject.conn_uuid
        subject.src, subject.sport, subject.dst, subject.dport = addr, port, None, None
        self.fire(
            "rcvbuf", ("port", addr, port), now=t, severity="warning", subject=subject,
            message=self._message(p, subject, addr, port, t, drops, arrived), clear_after=2 * w, metric=share,
            evidence=p.evidence, bump=new,
        )  # fmt: skip

    def _message(
        self, p: _UdpPort, subject: Subject, addr: str | None, port: int | None, t: float, drops: int, arrived: int
    ) -> str:
        w = self.window
        owner = f" of {who(subject)}" if subject.comm else ""
        buffer = ""
        if p.rcvbuf is not None:
            buffer = f": the buffer holds {p.rcvbuf} bytes (sk_rcvbuf, from SO_RCVBUF or net.core.rmem_default)"
            if p.rmem_alloc is not None and p.truesize is not None:
                buffer += f", {p.rmem_alloc} in use at the last drop, a datagram taking {p.truesize} with its overhead"
        reader = ""
        if p.reads_seen:
            reads = int(p.read.total(t))
            reader = (
                f". Its reader took {reads} datagrams in that time ({reads / w:.1f} a second) while they arrived at "
                f"{arrived / w:.1f} a second"
            )
        return (
            f"UDP socket {endpoint(addr, port)}{owner} dropped {drops} of the {arrived} datagrams that arrived in "
            f"{w:g} s ({drops / arrived:.1%}) because its receive buffer was full{buffer}{reader}. UDP has no "
            f"retransmission, so this is application data lost: read faster (or from more threads), or raise "
            f"SO_RCVBUF / net.core.rmem_max."
        )

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
