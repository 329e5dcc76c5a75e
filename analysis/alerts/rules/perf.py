"""K6 cwnd collapse and K7 srtt spikes, from siftr / tcpdebug samples (anomalies.md 4).

Both run on sampled data when the collector samples (SIFTR ppl > 1): a collapse or a
spike shorter than the sampling interval can be missed, never invented. Their alerts then
say so, with the ratio (message and Alert.sampling_ratio; base.Sampling, H2).

K6: cwnd in segments (snd_cwnd bytes ÷ mss) at most ``min_segments`` or at most
``max_fraction`` of its maximum over the previous ``window_s``, while data is
outstanding and the congestion state is Loss or CWR (an application-limited sender
sees its cwnd cut in Open without any loss, and PRR dips cwnd transiently during
Recovery; records without a ca_state count). Warning once it holds for ``hold_s`` or starts ``repeat_count`` times in
``repeat_window_s``. One finding per destination (address, port; issue 34 item 1,
groups.py): its members are the connections that collapsed while it was open; with one
member the finding is that connection's.

K7: a spike is ``consecutive`` samples of one connection over the limit lasting at
least ``min_hold_s``, or any run over the limit lasting ``hold_s``. The baseline belongs
to the destination, across its connections (anomalies.md K7): the remote /24 (IPv4) or
/64 (IPv6) and the remote port. It is the median of the destination's first
``seed_samples`` samples, then an exponentially weighted mean and mean deviation with a
``half_life_s`` half-life. Spike samples, and every sample while a connection of the
destination spikes or has its alert open, leave the baseline alone, so a long spike
cannot teach the baseline to accept itself. The message says whether other
connections to the destination spike at the same time (the path) or not (this peer).
A spike is one finding per destination (issue 34 item 1): its members are the
destination's connections spiking now; with one member the finding is that connection's.
"""

from __future__ import annotations

import ipaddress
import statistics
from array import array
from dataclasses import dataclass, field
from typing import Any

from translators.records import Record, SiftrSample, TcpCongState, TcpDebugSnapshot, TcpStateChange

from ..book import MAX_MEMBER_CONNS, Subject
from ..state import LruMap, bounded_append
from .base import Context, Rule, endpoint, flow_key, who
from .groups import Groups, callers, keep_subject, target_subject


@dataclass(slots=True)
class _Cwnd:
    mss: int | None = None
    # cwnd maxima of the current and the previous window-long bucket: "the maximum over
    # the previous 10 s" is read as the larger of the two (covers 10-20 s, four floats)
    bucket: int = -1
    cur_max: float = 0.0
    prev_max: float = 0.0
    collapsed_since: float | None = None
    starts: list[float] | None = None
    evidence: list[int] | None = None
    ca_state: str | None = None
    siftr: bool = False  # its cwnd series comes from SIFTR samples: sampled at --ppl (H2)


class CwndCollapse(Rule):
    rule_id = "K6"
    kinds = ("siftr_sample", "tcpdebug_snapshot", "tcp_cong_state", "tcp_state")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.flows = self.flows_map()
        self.groups = Groups(self.rule_id, ctx.book, ctx.max_keys)
        self.subjects: LruMap[object, Subject] = self.keys_map()  # per finding (groups.keep_subject)

    def feed(self, rec: Record) -> None:
        if isinstance(rec, TcpStateChange):
            if rec.state != "ESTABLISHED":
                self.flows.pop(flow_key(rec))
            return
        if isinstance(rec, TcpCongState):
            known = self.flows.get(flow_key(rec))
            if known is None:
                return  # no sample yet: not an established data flow (a SYN timeout, say)
            f = known
        else:
            f = self.flows.get_or_create(flow_key(rec), _Cwnd)
        if isinstance(rec, SiftrSample | TcpDebugSnapshot):
            f.mss = rec.mss or f.mss
            f.siftr = f.siftr or isinstance(rec, SiftrSample)
            outstanding = _outstanding(rec)
        elif isinstance(rec, TcpCongState):
            outstanding = True  # a congestion-state change happens with data in flight
        else:
            return
        f.ca_state = rec.ca_state or f.ca_state
        cwnd = getattr(rec, "snd_cwnd", None)
        if cwnd is None or not f.mss:
            return
        self._sample(rec, f, cwnd / f.mss, outstanding)

    def _sample(self, rec: Record, f: _Cwnd, segs: float, outstanding: bool) -> None:
        t = rec.ts_wall
        bucket = int(t // self.window)
        if bucket != f.bucket:
            f.prev_max = f.cur_max if bucket == f.bucket + 1 else 0.0
            f.cur_max, f.bucket = 0.0, bucket
        seen = max(f.cur_max, f.prev_max)
        previous_max = seen if seen > 0 else None
        f.cur_max = max(f.cur_max, segs)
        low = segs <= self.num("min_segments")
        relative = previous_max is not None and segs <= self.num("max_fraction") * previous_max
        # Linux also shrinks cwnd without any loss when the sender is application-limited
        # (cwnd validation, restart after idle: RFC 7661), in the Open state; and proportional
        # rate reduction dips cwnd transiently toward what is in flight during Recovery,
        # which ends at ssthresh. A collapse that matters follows a timeout (Loss) or
        # repeated congestion signals (CWR); records without a ca_state are judged as is.
        congested = f.ca_state in (None, "Loss", "CWR")
        if not (outstanding and congested and (low or relative)):
            f.collapsed_since = None
            return
        if f.collapsed_since is None:
            f.collapsed_since = t
            f.starts = [s for s in f.starts or () if s > t - self.num("repeat_window_s")] + [t]
            f.evidence = None  # evidence of this collapse episode
        f.evidence = bounded_append(f.evidence, rec.seq)
        self._check(rec, f, segs, previous_max, t)

    def _check(self, rec: Record, f: _Cwnd, segs: float, previous_max: float | None, t: float) -> None:
        assert f.collapsed_since is not None
        held = t - f.collapsed_since
        repeats = sum(1 for s in f.starts or () if s > t - self.num("repeat_window_s"))
        if held < self.num("hold_s") and repeats < self.num("repeat_count"):
            return
        subject = self.ctx.owner(rec)
        dst, dport = getattr(rec, "dst", None), getattr(rec, "dport", None)
        target = ("dest", dst, dport)
        g = self.groups.join("collapse", target, subject, flow_key(rec), subject.conn_uuid, -segs, target_subject)
        peak = f" from a peak of {previous_max:.0f}" if previous_max is not None else ""
        how = (
            f"for {held:.1f} s"
            if held >= self.num("hold_s")
            else f"{repeats} times in {self.num('repeat_window_s'):g} s"
        )
        if g.total == 1:
            subject = keep_subject(self.subjects, (subject.host_id, target), subject)
            message = (
                f"The congestion window of {who(subject)} toward {endpoint(dst, dport)} collapsed to {segs:.0f} "
                f"segment{'s' if segs >= 2 else ''}{peak} {how} with data outstanding: a retransmission timeout or "
                f"severe loss, and throughput drops to a trickle."
            )
        else:
            subject = keep_subject(self.subjects, (subject.host_id, target), g.subject)
            message = (
                f"The congestion windows of {callers(subject, g.total)} toward {endpoint(dst, dport)} collapsed with "
                f"data outstanding, the latest to {segs:.0f} segment{'s' if segs >= 2 else ''}{peak} {how}: "
                f"retransmission timeouts or severe loss on the path, and throughput drops to a trickle."
            )
        # H2: say when only every Nth packet was seen. A congestion-state change is exact, but
        # the collapse it extends was judged on the flow's cwnd series, sampled if from SIFTR.
        exact_extends_sampled = f.siftr and isinstance(rec, TcpCongState)
        sampled = self.ctx.sampling.flow_ratio(rec) if exact_extends_sampled else self.ctx.sampling.ratio(rec)
        message += self.ctx.sampling.note(sampled)
        self.fire(
            "collapse", target, now=t, severity="warning", subject=subject, message=message,
            clear_after=2 * self.window, metric=segs, evidence=f.evidence or (), sampling=sampled,
            members=g.total, member_conn_uuids=g.conns,
        )  # fmt: skip


def _outstanding(rec: SiftrSample | TcpDebugSnapshot) -> bool:
    if rec.snd_nxt is not None and rec.snd_una is not None:
        return rec.snd_nxt != rec.snd_una
    if isinstance(rec, SiftrSample) and rec.sent_inflight_bytes is not None:
        return rec.sent_inflight_bytes > 0
    return bool(rec.packets_out)


def destination(addr: str | None, port: int | None) -> tuple[str, int | None]:
    """The remote /24 (IPv4) or /64 (IPv6) and the remote port: K7's baseline key."""
    if addr is None:
        return ("?", port)
    try:
        net = ipaddress.ip_network(f"{addr}/{64 if ':' in addr else 24}", strict=False)
    except ValueError:
        return (addr, port)
    return (str(net), port)


@dataclass(slots=True)
class _Baseline:
    """srtt baseline of one destination (remote /24 or /64 and remote port), across connections."""

    seed: array[float] | None = field(default_factory=lambda: array("d"))
    base: float | None = None
    dev: float = 0.0
    updated: float = 0.0
    # connections of this destination spiking now or with an alert still open: while
    # any is, the baseline stands still (anomalies.md K7)
    alerting: set[Any] = field(default_factory=set)


@dataclass(slots=True)
class _Rtt:
    dest: tuple[str, str, int | None]
    consecutive: int = 0
    spike_since: float | None = None
    evidence: list[int] | None = None


class SrttSpike(Rule):
    rule_id = "K7"
    kinds = ("siftr_sample", "tcpdebug_snapshot", "tcp_state")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.flows = self.flows_map()
        self.dests: LruMap[tuple[str, str, int | None], _Baseline] = self.keys_map()
        self.subjects: LruMap[object, Subject] = self.keys_map()  # per finding (groups.keep_subject)

    def feed(self, rec: Record) -> None:
        if isinstance(rec, TcpStateChange):
            if rec.state != "ESTABLISHED":
                self.flows.pop(flow_key(rec))
            return
        if isinstance(rec, SiftrSample):
            srtt = rec.srtt
        elif isinstance(rec, TcpDebugSnapshot):
            srtt = rec.srtt_us
        else:
            return
        if not srtt:
            return
        key = flow_key(rec)
        f = self.flows.get(key)
        if f is None:  # the destination is worked out once per connection
            f = _Rtt((rec.host_id, *destination(rec.dst, rec.dport)))
            self.flows.put(key, f)
        d = self.dests.get_or_create(f.dest, _Baseline)
        if d.base is None:
            self._seed(d, float(srtt), rec.ts_wall)
            return
        self._sample(rec, key, f, d, float(srtt))

    def _seed(self, d: _Baseline, srtt: float, t: float) -> None:
        assert d.seed is not None
        d.seed.append(srtt)
        if len(d.seed) >= self.num("seed_samples"):
            d.base = statistics.median(d.seed)
            d.dev = statistics.fmean(abs(x - d.base) for x in d.seed)
            d.updated = t
            d.seed = None

    def limit(self, base: float, dev: float) -> float:
        return max(self.num("factor") * base, base + self.num("dev_factor") * dev, base + self.num("floor_ms") * 1000)

    def _sample(self, rec: Record, key: Any, f: _Rtt, d: _Baseline, srtt: float) -> None:
        assert d.base is not None
        t = rec.ts_wall
        limit = self.limit(d.base, d.dev)
        if srtt <= limit:
            f.consecutive, f.spike_since = 0, None
            if not self._held(d, f.dest, t):
                self._learn(d, srtt, t)
            return
        if f.spike_since is None:
            f.spike_since, f.evidence = t, None
        d.alerting.add(key)
        f.consecutive += 1
        f.evidence = bounded_append(f.evidence, rec.seq)
        held = t - f.spike_since
        # tcp_probe fires per received segment: 5 samples can span microseconds, so the
        # sample count only counts once the spike has also lasted min_hold_s
        by_count = f.consecutive >= self.num("consecutive") and held >= self.num("min_hold_s")
        if not by_count and held < self.num("hold_s"):
            return
        self._fire(rec, key, f, d, srtt, limit)

    def _held(self, d: _Baseline, dest: tuple[str, str, int | None], t: float) -> bool:
        """Whether a connection of the destination has its alert open, or a spike young enough
        to become one (hold_s); the others are pruned."""
        hold = self.num("hold_s")
        host_id, net, port = dest
        if self.ctx.book.is_open(self.rule_id, "spike", host_id, ("dest", net, port)):
            return bool(d.alerting)
        for key in list(d.alerting):
            f = self.flows.peek(key)
            young = f is not None and f.spike_since is not None and t - f.spike_since < hold
            if not young:
                d.alerting.discard(key)
        return bool(d.alerting)

    def _fire(self, rec: Record, key: Any, f: _Rtt, d: _Baseline, srtt: float, limit: float) -> None:
        assert d.base is not None
        _, net, port = f.dest
        spiking = sorted(
            (o.spike_since, str(k), k) for k in d.alerting if (o := self.flows.peek(k)) is not None and o.spike_since
        )
        members = [k for _, _, k in spiking]
        others = len(members) - 1
        together = (
            f"; {others} other connection{'s' if others > 1 else ''} to it {'spike' if others > 1 else 'spikes'} too: "
            f"queueing on the path"
            if others
            else "; no other connection to it spikes now: queueing on the path or a stalled peer"
        )
        subject = self.ctx.owner(rec)
        toward = f"{who(subject)} toward {endpoint(getattr(rec, 'dst', None), getattr(rec, 'dport', None))}"
        if others:
            message = (
                f"The smoothed RTT of {len(members)} connections rose over the limit of {limit / 1000:.2f} ms "
                f"against the baseline of {d.base / 1000:.2f} ms of connections to {net} port {port}, the latest "
                f"({toward}) to {srtt / 1000:.1f} ms ({f.consecutive} samples over the limit){together}"
            )
            subject.conn_uuid = subject.sock_cookie = subject.src = subject.sport = subject.dst = None
            subject.pid = subject.tgid = subject.comm = None  # the destination's, whoever calls it
        else:
            message = (
                f"The smoothed RTT of {toward} rose to {srtt / 1000:.1f} ms against the baseline of "
                f"{d.base / 1000:.2f} ms of connections to {net} port {port} ({f.consecutive} samples over the limit "
                f"of {limit / 1000:.2f} ms){together}"
            )
        message += "; beyond +200 ms retransmission timers start to interact."
        critical = srtt > d.base + self.num("critical_ms") * 1000
        sampled = self.ctx.sampling.ratio(rec)  # H2: say when only every Nth packet was seen
        message += self.ctx.sampling.note(sampled)
        subject = keep_subject(self.subjects, f.dest, subject)
        conns = [k for k in members if isinstance(k, str)][:MAX_MEMBER_CONNS]  # a socket's flow key: its conn_uuid
        self.fire(
            "spike", ("dest", net, port), now=rec.ts_wall, severity="critical" if critical else "warning",
            subject=subject, message=message, clear_after=2 * self.num("window_s"), metric=srtt,
            evidence=f.evidence or (), sampling=sampled, members=len(members), member_conn_uuids=conns,
        )  # fmt: skip

    def _learn(self, d: _Baseline, srtt: float, t: float) -> None:
        assert d.base is not None
        alpha = 1.0 - 0.5 ** (max(t - d.updated, 0.0) / self.num("half_life_s"))
        d.base += alpha * (srtt - d.base)
        d.dev += alpha * (abs(srtt - d.base) - d.dev)
        d.updated = t
