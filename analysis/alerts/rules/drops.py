"""K12: skb drop reasons not owned by a more specific rule (anomalies.md 4, K12).

Reasons fall into the families of anomalies.md K12: policy drops (netfilter, tc, XDP,
cgroup BPF) and window/sequence or PAWS mismatches are noticed per flow; checksum
failures per host and reason; authentication failures (MD5/AO) are warnings per flow;
reachability failures (neighbour, no route) warn once repeated; host or driver
saturation (qdisc, backlog, ring, nomem) warns above ``saturation_rate`` per second
sustained for ``saturation_seconds``; any other reason is a notice once it bursts to
``burst_count`` in ``window_s``. Host-level counts come from exact ``drop_count``
deltas once the collector reports them for a reason (events may be rate-limited), and
from ``skb_drop`` events before that; a delta is spread evenly over the time since the
previous report of its reason, at most one read interval of the collector (learnt from
the reports), since reads come about once a second but not on second boundaries.

Two escalations to warning:
- *sequence share*: window/sequence drops of one flow exceed ``sequence_share`` of the
  segments that flow received in ``window_s`` (at least ``sequence_min_segments``).
  Received segments come from the exact per-flow counters, ``flow_counters``
  packets_in (siftr) or ``ip_flow_counters`` receive packets (ip-flows), the larger
  of the two; without either, the drops stay notices.
- *policy rate change*: the host's policy drops of one reason over the last
  ``policy_window_s`` reach ``policy_min_rate`` per second and ``policy_change_factor``
  times their average rate over the ``policy_baseline_s`` before. The rule only judges
  once it has watched that long (engine time, heartbeats included), so a collector
  start in the middle of steady drops is not a change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translators.records import DropCount, FlowCounters, IpFlowCounters, Record, SkbDrop

from ..state import LruMap, Window
from .base import Context, Rule, endpoint, flow_key, host_subject

FAMILIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("policy", ("NETFILTER_DROP", "TC_INGRESS", "TC_EGRESS", "XDP", "BPF_CGROUP_EGRESS", "BPF_CGROUP_INGRESS")),
    ("saturation", ("QDISC_DROP", "CPU_BACKLOG", "FULL_RING", "NOMEM", "QDISC_OVERLIMIT", "QDISC_CONGESTED")),
    ("checksum", ("TCP_CSUM", "IP_CSUM", "SKB_CSUM", "ICMP_CSUM")),
    ("sequence", ("TCP_OVERWINDOW", "TCP_INVALID_SEQUENCE", "TCP_OLD_SEQUENCE", "TCP_INVALID_ACK_SEQUENCE",
                  "TCP_INVALID_END_SEQUENCE")),
    ("paws", ("TCP_RFC7323_PAWS", "TCP_RFC7323_PAWS_ACK", "TCP_RFC7323_TSECR", "TCP_RFC7323_TW_PAWS")),
    ("auth", ("TCP_MD5NOTFOUND", "TCP_MD5UNEXPECTED", "TCP_MD5FAILURE", "TCP_AONOTFOUND", "TCP_AOUNEXPECTED",
              "TCP_AOKEYNOTFOUND", "TCP_AOFAILURE", "TCP_AUTH_HDR")),
    ("reachability", ("NEIGH_CREATEFAIL", "NEIGH_FAILED", "NEIGH_QUEUEFULL", "NEIGH_DEAD", "NEIGH_HH_FILLFAIL",
                      "IP_OUTNOROUTES", "IP_INNOROUTES")),
)  # fmt: skip
FAMILY_OF = {reason: fam for fam, reasons in FAMILIES for reason in reasons}
DEFAULT_READ_S = 1.0  # collect --flow-interval's default
PER_FLOW = {"policy": "notice", "sequence": "notice", "paws": "notice", "auth": "warning"}
WHY = {
    "policy": "a firewall or filter (netfilter, tc, XDP, cgroup BPF) is discarding this traffic",
    "saturation": "the host or its driver cannot keep up (queues, backlog or memory are full)",
    "checksum": "packets arrive corrupted, or NIC checksum offload misbehaves",
    "sequence": "segments fall outside the window, typical of a middlebox or a NAT rewriting sequence numbers",
    "paws": "timestamps go backwards (PAWS), typical of several clients behind one NAT",
    "auth": "TCP authentication (MD5/AO) failed: a misconfiguration or a spoofing attempt",
    "reachability": "the next hop or the route is missing, so packets cannot leave",
    "other": "the kernel is discarding packets for this reason in bulk",
}


def reasons(text: str | float | int | bool) -> frozenset[str]:
    return frozenset(r.strip() for r in str(text).split(",") if r.strip())


@dataclass(slots=True)
class _Counts:
    drops: Window
    exact: bool = False
    evidence: list[int] = field(default_factory=list)
    # policy reasons: the last policy_window_s, and it plus the baseline before it
    recent: Window | None = None
    spanned: Window | None = None
    reported: float | None = None  # time of the last exact count

    def add(self, t: float, n: float = 1.0) -> None:
        self.drops.add(t, n)
        if self.recent is not None and self.spanned is not None:
            self.recent.add(t, n)
            self.spanned.add(t, n)

    def add_report(self, t: float, delta: int, cadence: float) -> None:
        """An exact count's delta covers the time since the collector's previous read of
        its map: spread it over those seconds (reads come about once a second, not on
        second boundaries, so putting it all at the report's second would leave some
        seconds empty). A reason only reports when it moved, so the read before may have
        come later than this reason's previous report: at most ``cadence`` is spread over."""
        start, self.reported = self.reported, t
        if start is None or t - start <= 0:
            self.add(t, delta)
            return
        at = max(start, t - cadence)
        rate = delta / (t - at)
        while at < t:
            nxt = min(t, float(int(at) + 1))
            self.add(at, rate * (nxt - at))  # the piece (at, nxt] belongs to second int(at)
            at = nxt


@dataclass(slots=True)
class _Segments:
    """Segments one flow received, from each exact counter source (local-first tuple)."""

    siftr: Window
    ip: Window
    last_siftr: int | None = None


TupleKey = tuple[str, str | None, int | None, str | None, int | None]


class DropBurst(Rule):
    rule_id = "K12"
    kinds = ("skb_drop", "drop_count", "flow_counters", "ip_flow_counters")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.skip = reasons(self.p["ignore_reasons"]) | reasons(self.p["owned_reasons"])
        self.hosts = self.keys_map()
        self.flows = self.flows_map()
        self.segments: LruMap[TupleKey, _Segments] = self.flows_map()
        self.policy_span = self.num("policy_window_s") + self.num("policy_baseline_s")
        self.started: float | None = None  # engine time the rule first saw: how long it has watched
        # per host: the time of the collector's last drop-map read, and the shortest gap
        # between two reads seen (its --flow-interval, about)
        self.reads: LruMap[str, tuple[float, float | None]] = self.keys_map()

    def tick(self, now: float) -> None:
        if self.started is None:
            self.started = now

    def feed(self, rec: Record) -> None:
        if self.started is None:
            self.started = rec.ts_wall
        if isinstance(rec, FlowCounters | IpFlowCounters):
            self._count_segments(rec)
            return
        if not isinstance(rec, SkbDrop | DropCount) or rec.drop_reason_str in self.skip:
            return
        reason = rec.drop_reason_str
        family = FAMILY_OF.get(reason, "other")
        span = max(self.window, self.num("saturation_seconds")) + 1
        h = self.hosts.get_or_create((rec.host_id, reason), lambda: self._counts(span, family))
        if isinstance(rec, DropCount):
            if not h.exact:  # exact counts replace sampled events from now on
                h.exact, h.drops, h.recent, h.spanned = True, *self._windows(span, family)
            cadence = self._cadence(rec)
            if rec.delta <= 0:
                h.reported = rec.ts_wall
                return
            h.add_report(rec.ts_wall, rec.delta, cadence)
        elif not h.exact:
            h.add(rec.ts_wall)
        if len(h.evidence) < 32:
            h.evidence.append(rec.seq)
        if family == "policy":
            self._policy_change(rec, reason, h)
        if isinstance(rec, SkbDrop) and family in PER_FLOW:
            self._per_flow(rec, family)
        else:
            self._per_host(rec, reason, family, h)

    def _cadence(self, rec: DropCount) -> float:
        """How often the collector reads its drop map: the shortest gap seen between two
        reads that reported (a multiple of the read interval), 1 s (its default) until then."""
        t = rec.ts_wall
        last, gap = self.reads.peek(rec.host_id) or (t, None)
        if t - last > 0.05:  # a new read: the records of one read share its time
            gap = t - last if gap is None else min(gap, t - last)
        self.reads.put(rec.host_id, (max(last, t), gap))
        return gap if gap is not None else DEFAULT_READ_S

    def _windows(self, span: float, family: str) -> tuple[Window, Window | None, Window | None]:
        if family != "policy":
            return Window(span), None, None
        return Window(span), Window(self.num("policy_window_s")), Window(self.policy_span)

    def _counts(self, span: float, family: str) -> _Counts:
        drops, recent, spanned = self._windows(span, family)
        return _Counts(drops, recent=recent, spanned=spanned)

    def _count_segments(self, rec: FlowCounters | IpFlowCounters) -> None:
        w = self.window
        if isinstance(rec, FlowCounters):
            if rec.proto != "tcp":
                return
            key: TupleKey = (rec.host_id, rec.src, rec.sport, rec.dst, rec.dport)  # local first
            seg = self.segments.get_or_create(key, lambda: _Segments(Window(w), Window(w)))
            if seg.last_siftr is not None and rec.packets_in > seg.last_siftr:
                seg.siftr.add(rec.ts_wall, rec.packets_in - seg.last_siftr)
            elif seg.last_siftr is None and rec.packets_in > 0:
                seg.siftr.add(rec.ts_wall, rec.packets_in)  # the first report counts from the flow's start
            seg.last_siftr = rec.packets_in
        elif rec.direction == "receive" and rec.protocol == 6 and rec.packets_delta > 0:
            key = (rec.host_id, rec.dst, rec.dport, rec.src, rec.sport)  # packet orientation: the receiver is dst
            seg = self.segments.get_or_create(key, lambda: _Segments(Window(w), Window(w)))
            seg.ip.add(rec.ts_wall, rec.packets_delta)

    def _received(self, rec: SkbDrop) -> float:
        """Segments the dropping flow received in the window (0: no exact counter seen)."""
        seg = self.segments.peek((rec.host_id, rec.dst, rec.dport, rec.src, rec.sport))
        if seg is None:
            return 0.0
        return max(seg.siftr.total(rec.ts_wall), seg.ip.total(rec.ts_wall))

    def _policy_change(self, rec: SkbDrop | DropCount, reason: str, h: _Counts) -> None:
        t = rec.ts_wall
        recent_s, base_s = self.num("policy_window_s"), self.num("policy_baseline_s")
        if self.started is None or t - self.started < self.policy_span or h.recent is None or h.spanned is None:
            return  # not watched long enough to know the usual rate
        in_recent = h.recent.total(t)
        recent = in_recent / recent_s
        before = (h.spanned.total(t) - in_recent) / base_s
        if recent < self.num("policy_min_rate") or recent < self.num("policy_change_factor") * before:
            return
        where = f" (latest at {rec.drop_location})" if rec.drop_location else ""
        message = (
            f"Policy drops with reason {reason}{where} jumped to {recent:.1f} per second over the last "
            f"{recent_s:g} s from {before:.2f} per second in the {base_s:g} s before: a firewall or filter rule "
            f"changed, or new traffic is hitting one."
        )
        self.fire(
            "policy-rate-change", ("reason", reason), now=t, severity="warning", subject=host_subject(rec),
            message=message, clear_after=2 * recent_s, metric=recent, evidence=h.evidence,
        )  # fmt: skip

    def _per_flow(self, rec: SkbDrop, family: str) -> None:
        w = self.window
        f = self.flows.get_or_create((flow_key(rec), rec.drop_reason_str), lambda: _Counts(Window(w)))
        f.drops.add(rec.ts_wall)
        if len(f.evidence) < 32:
            f.evidence.append(rec.seq)
        n = int(f.drops.total(rec.ts_wall))
        subject = self.ctx.owner(rec, rec.l4_proto)
        where = f" at {rec.drop_location}" if rec.drop_location else ""
        severity, share = PER_FLOW[family], ""
        if family == "sequence":
            received = self._received(rec)
            if received >= self.num("sequence_min_segments") and n > self.num("sequence_share") * received:
                severity = "warning"
                share = f" ({n / received:.1%} of the {int(received)} segments it received)"
        if rec.l4_proto in ("tcp", "udp") and (rec.sport or rec.dport):
            ends = f"{endpoint(rec.src, rec.sport)} -> {endpoint(rec.dst, rec.dport)}"
        else:  # ICMP and other portless packets: their "ports" are 0, not a port (issue 34)
            ends = f"{rec.l4_proto or 'IP'} {rec.src} -> {rec.dst}"
        message = (
            f"{n} packet{'s' if n > 1 else ''} of {ends} "
            f"dropped with reason {rec.drop_reason_str}{where} in {w:g} s{share}: {WHY[family]}."
        )
        self.fire(
            rec.drop_reason_str.lower(), (flow_key(rec), rec.drop_reason_str), now=rec.ts_wall,
            severity=severity, subject=subject, message=message, clear_after=2 * w, metric=float(n),
            evidence=f.evidence,
        )  # fmt: skip

    def _per_host(self, rec: SkbDrop | DropCount, reason: str, family: str, h: _Counts) -> None:
        t = rec.ts_wall
        w = self.window
        n = round(sum(h.drops.per_second(t, int(w))), 6)  # spread exact counts are fractions
        if family == "saturation":
            secs = int(self.num("saturation_seconds"))
            per_sec = h.drops.per_second(t, secs + 1)[:-1]  # whole seconds only
            if min(per_sec) <= self.num("saturation_rate"):
                return
            severity, detail = "warning", f"more than {self.num('saturation_rate'):g} per second for {secs} s"
        elif family == "checksum":
            severity, detail = "notice", f"{int(n)} in {w:g} s"
        elif family == "reachability":
            if n < self.num("repeat_count"):
                return
            severity, detail = "warning", f"{int(n)} in {w:g} s"
        else:
            if n < self.num("burst_count"):
                return
            severity, detail = "notice", f"a burst of {int(n)} in {w:g} s"
        where = f" (latest at {rec.drop_location})" if rec.drop_location else ""
        message = f"This host dropped packets with reason {reason}{where}, {detail}: {WHY[family]}."
        self.fire(
            reason.lower(), ("reason", reason), now=t, severity=severity, subject=host_subject(rec),
            message=message, clear_after=2 * w, metric=float(n), evidence=h.evidence,
        )  # fmt: skip
