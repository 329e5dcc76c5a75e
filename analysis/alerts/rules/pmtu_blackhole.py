"""K2 ``pmtu-black-hole``: a path-MTU black hole, one finding per path (issue 34 item 2).

A sender's full-size segments with DF set are too big for a link on the way: the router
drops them and answers with an ICMP "fragmentation needed" (IPv6: "packet too big"). When
that ICMP error is dropped (a firewall) or never arrives, the sender never learns the smaller
MTU and retransmits the same large segments until it gives up, while smaller segments pass.

Evidence, as the host sends it:
- ``skb_drop`` PKT_TOO_BIG of a TCP packet at a forwarding hop of this host (a router network
  namespace): the packet's own tuple (no socket holds it), its IP size (``len``) and the hop's
  namespace. The path is (the hop's namespace, the destination address): key ``("hop", netns, dst)``.
- ``skb_drop`` NETFILTER_DROP of an ICMP / ICMPv6 packet addressed to a sender of those packets
  within ``window_s`` of one: the hop's ICMP error dropped by a firewall (the record carries no
  ICMP type; it is matched by its address and its time).
- ``stack_counter`` Ip / Ip6 FragFails of the hop's namespace (collector/stack_counters.py):
  the kernel's own count of packets it could not forward for their size.
- ``tcp_retransmit`` of the senders' connections (matched by tuple: members, segment sizes),
  and ``siftr_sample`` out/in pairs for the largest segment the peer acknowledged (the size
  that passes), when the siftr provider runs.

Beyond this host (no hop here dropped a connection's packets): a connection that retransmitted
``pmtu_min_drops`` segments larger than any of its segments the peer acknowledged, while smaller
ones were acknowledged, is a suspected black hole, one finding per destination address: key
``("beyond", dst)``.

Counts are of the finding's episode (since it opened; a finding closed for ``2 x window_s``
starts afresh). Keep in sync with docs/alerts.md (K2), defaults.toml ([K2] pmtu_*).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translators.records import FlowRecord, Record, SiftrSample, SkbDrop, StackCounter, TcpRetransmit, TcpStateChange

from ..book import MAX_MEMBER_CONNS, Subject
from ..state import LruMap, bounded_append
from .base import Context, Rule, endpoint, subject_of, who
from .connect_causes import drop_place

TOO_BIG = "PKT_TOO_BIG"
ICMP = frozenset({"icmp", "icmpv6"})
FRAG_FAILS = {4: "Ip", 6: "Ip6"}  # the hop's FragFails counter per IP version (its mib)
PAIR_S = 1.0  # an ICMP error's drop and the drop of the packet it answers: this close in time
MAX_OUT = 32  # outgoing segments remembered per connection until acknowledged
Tuple = tuple[str, str | None, int | None, str | None, int | None]


@dataclass(slots=True)
class _Conn:
    """A sending connection, known by its tuple (the dropped packets carry no socket)."""

    subject: Subject
    retrans: int = 0  # retransmitted segments (tcp_skb_pcount) while its path's finding is open
    retrans_size: int = 0  # the largest retransmitted segment's payload
    smallest_retrans: int = 0  # the smallest retransmitted segment's payload after a drop
    passed: int = 0  # the largest payload of a segment the peer acknowledged
    out: list[tuple[int, int]] = field(default_factory=list)  # (sequence after it, payload) unacknowledged
    path: tuple[object, ...] | None = None
    last_drop: float = float("-inf")
    big: int = 0  # no hop here dropped it: segments retransmitted larger than any acknowledged
    big_size: int = 0


@dataclass(slots=True)
class _Path:
    hop_netns: int | None
    dst: str | None
    sender: str | None
    first: float
    ip_ver: int = 4
    last: float = 0.0
    too_big: int = 0
    sizes: tuple[int, int] = (0, 0)  # smallest and largest IP size of the dropped packets
    icmp: dict[str, int] = field(default_factory=dict)  # where the ICMP errors were dropped -> count
    conns: dict[Tuple, None] = field(default_factory=dict)  # the senders' tuples, in the order they joined
    evidence: list[int] | None = None
    fired: bool = False
    frag_before: int | None = None  # the hop's FragFails read last before the first drop


class PathMtuBlackHole(Rule):
    rule_id = "K2"
    kinds = ("skb_drop", "stack_counter", "tcp_retransmit", "tcp_state", "siftr_sample")
    CONDITION = "pmtu-black-hole"

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.min_drops = int(self.num("pmtu_min_drops"))
        self.conns: LruMap[Tuple, _Conn] = self.flows_map()
        self.paths: LruMap[tuple[object, ...], _Path] = self.keys_map()
        self.senders: LruMap[tuple[str, str], tuple[object, ...]] = self.keys_map()  # sender address -> path
        # (host, netns) -> the hop's latest FragFails, and its name
        self.frag: LruMap[tuple[str, int | None, str], int] = self.keys_map()
        self.names: LruMap[tuple[str, int | None], str] = self.keys_map()
        self.icmp_waiting: LruMap[tuple[str, str], list[SkbDrop]] = self.keys_map()
        self.beyond: LruMap[tuple[object, ...], dict[Tuple, None]] = self.keys_map()  # path -> its connections

    # --- feeding ----------------------------------------------------------------------------

    def feed(self, rec: Record) -> None:
        if isinstance(rec, SkbDrop):
            if rec.drop_reason_str == TOO_BIG and rec.l4_proto == "tcp":
                self._too_big(rec)
            elif rec.drop_reason_str == "NETFILTER_DROP" and rec.l4_proto in ICMP and rec.dst:
                self._icmp_dropped(rec)
        elif isinstance(rec, StackCounter):
            if rec.counter == "FragFails" and rec.mib in ("Ip", "Ip6"):
                self.frag.put((rec.host_id, rec.netns, rec.mib), rec.value)
                if rec.netns_name:
                    self.names.put((rec.host_id, rec.netns), rec.netns_name)
                self._refire_hop(rec)
        elif isinstance(rec, TcpRetransmit):
            self._retransmit(rec)
        elif isinstance(rec, TcpStateChange):
            if rec.state == "ESTABLISHED" or rec.state == "SYN_SENT":
                self._conn(rec)
        elif isinstance(rec, SiftrSample):
            self._sample(rec)

    @staticmethod
    def _tuple(rec: FlowRecord) -> Tuple:
        return (rec.host_id, rec.src, rec.sport, rec.dst, rec.dport)

    def _conn(self, rec: FlowRecord) -> _Conn:
        tup = self._tuple(rec)
        conn = self.conns.get(tup)
        if conn is None:
            conn = _Conn(self.ctx.owner(rec))
            self.conns.put(tup, conn)
        elif conn.subject.conn_uuid is None and rec.conn_uuid is not None:
            conn.subject = self.ctx.owner(rec)
        elif conn.subject.comm is None and rec.comm and rec.pid:
            conn.subject = self.ctx.owner(rec)
        return conn

    def _sample(self, rec: SiftrSample) -> None:
        conn = self.conns.peek(self._tuple(rec))
        if conn is None:
            return  # only connections already seen by their state or retransmits
        if rec.direction == "out" and rec.data_sz and rec.th_seq is not None:
            # only a segment larger than the largest acknowledged can say more (a bulk flow's
            # full-size segments cost nothing once one was acknowledged)
            if rec.data_sz > conn.passed and len(conn.out) < MAX_OUT:
                conn.out.append(((rec.th_seq + rec.data_sz) & 0xFFFFFFFF, rec.data_sz))
        elif rec.direction == "in" and rec.th_ack is not None and conn.out:
            ack, keep = rec.th_ack, []
            for end, size in conn.out:
                if (ack - end) & 0xFFFFFFFF < 0x80000000:
                    conn.passed = max(conn.passed, size)
                    if conn.passed >= conn.big_size:
                        conn.big = conn.big_size = 0  # a segment that large got through after all
                else:
                    keep.append((end, size))
            conn.out = keep

    def _retransmit(self, rec: TcpRetransmit) -> None:
        if not rec.tcp_payload_len:
            return
        conn = self._conn(rec)
        segs = rec.segs or 1
        size = rec.tcp_payload_len // segs
        if conn.path is None or not self._live(conn.path, rec.ts_wall):
            conn.retrans_size = max(conn.retrans_size, size)  # before any drop: remembered, not counted
            if conn.path is None and conn.passed and size > conn.passed:
                conn.big += segs
                conn.big_size = max(conn.big_size, size)
                if conn.big >= self.min_drops:
                    self._beyond(conn, rec)
            return
        conn.retrans += segs
        conn.retrans_size = max(conn.retrans_size, size)
        if rec.ts_wall > conn.last_drop:
            conn.smallest_retrans = min(conn.smallest_retrans or size, size)
        path = self.paths.peek(conn.path)
        if path is not None and path.fired:
            self._fire(conn.path, path, rec)

    # --- the path ---------------------------------------------------------------------------

    def _live(self, key: tuple[object, ...], t: float) -> bool:
        path = self.paths.peek(key)
        return path is not None and t - path.last <= 2 * self.window

    def _too_big(self, rec: SkbDrop) -> None:
        key: tuple[object, ...] = (rec.host_id, "hop", rec.netns, rec.dst)
        path = self.paths.get(key)
        t = rec.ts_wall
        if path is None or (t - path.last > 2 * self.window and not self._open(key)):
            path = _Path(rec.netns, rec.dst, rec.src, t, ip_ver=rec.ip_ver or 4)
            self.paths.put(key, path)
            path.frag_before = self.frag.peek((rec.host_id, rec.netns, FRAG_FAILS[path.ip_ver]))
        path.last = t
        path.too_big += 1
        size = rec.len or 0
        path.sizes = (min(path.sizes[0] or size, size), max(path.sizes[1], size))
        path.evidence = bounded_append(path.evidence, rec.seq, 32)
        tup = self._tuple(rec)
        if tup not in path.conns and len(path.conns) < 4096:
            path.conns[tup] = None
        conn = self.conns.get(tup)
        if conn is None:
            conn = _Conn(self.ctx.owner(rec))
            self.conns.put(tup, conn)
        conn.path, conn.last_drop = key, t
        if rec.src:
            self.senders.put((rec.host_id, rec.src), key)
            for icmp in self.icmp_waiting.pop((rec.host_id, rec.src)) or ():
                if t - icmp.ts_wall <= PAIR_S:
                    self._count_icmp(key, path, icmp)
        if path.too_big >= self.min_drops:
            path.fired = True
            self._fire(key, path, rec)

    def _icmp_dropped(self, rec: SkbDrop) -> None:
        key = self.senders.peek((rec.host_id, rec.dst or ""))
        path = self.paths.peek(key) if key is not None else None
        if key is None or path is None or rec.ts_wall - path.last > PAIR_S:
            # the hop sends its ICMP error before it frees the packet (ip_forward): the drop of
            # the error comes first, and waits here for the packet's own drop
            waiting = self.icmp_waiting.get_or_create((rec.host_id, rec.dst or ""), list)
            if len(waiting) < MAX_OUT:
                waiting.append(rec)
            return
        self._count_icmp(key, path, rec)

    def _count_icmp(self, key: tuple[object, ...], path: _Path, rec: SkbDrop) -> None:
        place = drop_place(rec)
        path.icmp[place] = path.icmp.get(place, 0) + 1
        path.evidence = bounded_append(path.evidence, rec.seq, 32)
        if path.fired:
            self._fire(key, path, rec)

    def _refire_hop(self, rec: StackCounter) -> None:
        for key, path in list(self.paths.items()):
            if key[0] == rec.host_id and path.hop_netns == rec.netns and path.fired and self._open(key):
                self._fire(key, path, rec)

    def _open(self, key: tuple[object, ...]) -> bool:
        return self.ctx.book.is_open(self.rule_id, self.CONDITION, str(key[0]), key)

    # --- the finding ------------------------------------------------------------------------

    def _fire(self, key: tuple[object, ...], path: _Path, rec: Record) -> None:
        conns = [c for c in (self.conns.peek(t) for t in path.conns) if c is not None]
        subject = self._subject(path, conns, rec)
        self.ctx.pmtu.put((rec.host_id, path.dst), key)
        icmp = sum(path.icmp.values())
        self.fire(
            self.CONDITION, key, now=rec.ts_wall, severity="critical" if icmp else "warning", subject=subject,
            message=self.message(key, path, conns, subject), clear_after=2 * self.window,
            metric=float(path.too_big), evidence=path.evidence or (), bump=False, count=path.too_big,
            members=len(path.conns),
            member_conn_uuids=[c.subject.conn_uuid for c in conns if c.subject.conn_uuid][:MAX_MEMBER_CONNS],
        )  # fmt: skip

    def _subject(self, path: _Path, conns: list[_Conn], rec: Record) -> Subject:
        first = conns[0].subject if conns else subject_of(rec, "tcp")
        owners = {c.subject.tgid or c.subject.pid for c in conns}
        one = len(owners) == 1 and first.comm is not None
        ports = {c.subject.dport for c in conns}
        return Subject(
            host_id=rec.host_id, boot_id=rec.boot_id, pid=(first.tgid or first.pid) if one else None,
            tgid=(first.tgid or first.pid) if one else None, comm=first.comm if one else None,
            netns=path.hop_netns, proto="tcp", ip_ver=first.ip_ver, src=path.sender, dst=path.dst,
            dport=first.dport if len(ports) == 1 else None,
            conn_uuid=first.conn_uuid if len(path.conns) == 1 else None,
        )  # fmt: skip

    def _hop(self, host: str, netns: int | None) -> str:
        name = self.names.peek((host, netns))
        return f"network namespace {netns} ({name})" if name else f"network namespace {netns}"

    def message(self, key: tuple[object, ...], path: _Path, conns: list[_Conn], subject: Subject) -> str:
        host = str(key[0])
        small, large = path.sizes
        sizes = f"{small}" if small == large else f"{small} to {large}"
        hop = self._hop(host, path.hop_netns)
        out = (
            f"Path-MTU black hole toward {path.dst}: the forwarding hop in {hop} on this host dropped {path.too_big} "
            f"packets of {sizes} bytes as PKT_TOO_BIG (larger than its next link's MTU, with Don't Fragment set)"
        )
        mib = FRAG_FAILS[path.ip_ver]
        value = self.frag.peek((host, path.hop_netns, mib))
        if value is not None:
            since = value - (path.frag_before or 0)
            out += (
                f"; it counted {since} {mib}FragFails meanwhile ({value} since it was created, as nstat -a reads them)"
            )
        out += ". " + self._icmp_sentence(path, conns)
        out += " " + self._conns_sentence(path, conns, subject)
        out += " " + self._mtu_sentence(path, conns)
        return out + (
            " Fix: let ICMP type 3 code 4 (IPv6: type 2, packet too big) through, or clamp the TCP MSS at the hop "
            "(nft: tcp flags syn tcp option maxseg size set rt mtu)."
        )

    @staticmethod
    def _icmp_sentence(path: _Path, conns: list[_Conn]) -> str:
        sender = path.sender or "the sender"
        icmp = sum(path.icmp.values())
        what = '"packet too big"' if path.ip_ver == 6 else '"fragmentation needed"'
        if icmp:
            places = ", ".join(f"{w} ({n})" for w, n in sorted(path.icmp.items()))
            return (
                f"Its ICMP errors ({what}) never reached the sender {sender}: {icmp} ICMP packets to "
                f"it were dropped by a firewall, {places}, so the sender never learns the smaller MTU and keeps "
                f"sending full-size segments: a black hole."
            )
        shrunk = [c for c in conns if c.smallest_retrans and c.smallest_retrans < c.retrans_size]
        if shrunk:
            return (
                f"Its ICMP errors reached the sender {sender}: it retransmitted in segments of "
                f"{min(c.smallest_retrans for c in shrunk)} bytes afterwards (the smaller MTU was learnt)."
            )
        return (
            f"No drop of its ICMP errors ({what}) was seen on this host: if {sender} keeps "
            f"retransmitting full-size segments, they are lost or filtered on the way back."
        )

    @staticmethod
    def _conns_sentence(path: _Path, conns: list[_Conn], subject: Subject) -> str:
        n = len(path.conns)
        whose = f" of {who(subject)}" if subject.comm else ""
        to = endpoint(path.dst, subject.dport) if subject.dport is not None else path.dst
        retrans = sum(c.retrans for c in conns)
        size = max((c.retrans_size for c in conns), default=0)
        out = f"{n} connection{'s' if n != 1 else ''}{whose} to {to} "
        out += f"retransmitted {retrans} segments" if retrans else "had no retransmit recorded (tcp provider)"
        if size:
            out += f" of up to {size} bytes"
        passed = max((c.passed for c in conns), default=0)
        if passed:
            return out + f", while segments of up to {passed} bytes got through."
        return (
            out
            + "; no smaller segment of theirs is known to have got through (siftr provider: the sizes acknowledged)."
        )

    @staticmethod
    def _mtu_sentence(path: _Path, conns: list[_Conn]) -> str:
        small = path.sizes[0]
        size = max((c.retrans_size for c in conns), default=0)
        passed = max((c.passed for c in conns), default=0)
        headers = small - size if size and 0 < small - size <= 120 else None
        out = f"The next link's MTU is below {small} bytes (the smallest packet dropped)"
        if passed and headers is not None:
            out += f" and at least {passed + headers} ({passed} bytes that passed plus {headers} of IP and TCP headers)"
        return out + "."

    # --- a hole beyond this host (no hop here dropped the packets) ------------------------------

    def _beyond(self, conn: _Conn, rec: TcpRetransmit) -> None:
        key: tuple[object, ...] = (rec.host_id, "beyond", rec.dst)
        tuples = self.beyond.get(key)
        if tuples is None or not self._open(key):
            tuples = {}
            self.beyond.put(key, tuples)
        tup = self._tuple(rec)
        if tup not in tuples and len(tuples) < 4096:
            tuples[tup] = None
        conns = [c for c in (self.conns.peek(t) for t in tuples) if c is not None and c.big]
        path = _Path(None, rec.dst, rec.src, rec.ts_wall, ip_ver=rec.ip_ver or 4)
        path.conns = tuples
        subject = self._subject(path, conns, rec)
        subject.netns = conn.subject.netns
        big = sum(c.big for c in conns)
        size, passed = max(c.big_size for c in conns), max(c.passed for c in conns)
        n = len(tuples)
        whose = f" of {who(subject)}" if subject.comm else ""
        to = endpoint(rec.dst, subject.dport) if subject.dport is not None else rec.dst
        what = '"packet too big"' if path.ip_ver == 6 else '"fragmentation needed"'
        self.ctx.pmtu.put((rec.host_id, rec.dst), key)
        message = (
            f"Path-MTU black hole suspected toward {rec.dst}: {n} connection{'s' if n != 1 else ''}{whose} to {to} "
            f"retransmitted {big} segments of up to {size} bytes and no segment that large was ever acknowledged, "
            f"while segments of up to {passed} bytes got through. No hop on this host dropped them: a router beyond "
            f"it drops packets larger than its next link's MTU and its ICMP {what} does not come back (filtered on "
            f"the way, or never sent). The path carries {passed} bytes of payload per segment but not {size}. Fix: "
            f"let ICMP type 3 code 4 (IPv6: type 2, packet too big) through, or clamp the TCP MSS (nft: tcp flags "
            f"syn tcp option maxseg size set rt mtu)."
        )
        self.fire(
            self.CONDITION, key, now=rec.ts_wall, severity="warning", subject=subject, message=message,
            clear_after=2 * self.window, metric=float(big), evidence=(rec.seq,), bump=False, count=big,
            members=n, member_conn_uuids=[c.subject.conn_uuid for c in conns if c.subject.conn_uuid][:MAX_MEMBER_CONNS],
        )  # fmt: skip
