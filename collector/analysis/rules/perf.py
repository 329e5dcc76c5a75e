"""K6 cwnd collapse and K7 srtt spikes, from siftr / tcpdebug samples (anomalies.md 4).

Both run on sampled data when the collector samples (SIFTR ppl > 1): a collapse or a
spike shorter than the sampling interval can be missed, never invented. Their alerts then
say so, with the ratio (message and Alert.sampling_ratio; base.Sampling, H2).

K6: cwnd in segments (snd_cwnd bytes ÷ mss) at most ``min_segments`` or at most
``max_fraction`` of its maximum over the previous ``window_s``, while data is
outstanding and the congestion state is Loss or CWR (an application-limited sender
sees its cwnd cut in Open without any loss, and PRR dips cwnd transiently during
Recovery; records without a ca_state count). Warning once it holds for ``hold_s`` or starts ``repeat_count`` times in
``repeat_window_s``.

K7: a spike is ``consecutive`` samples over the limit lasting at least ``min_hold_s``,
or any run over the limit lasting ``hold_s``. The baseline is this connection's own srtt: the median of its first
``seed_samples`` samples, then an exponentially weighted mean and mean deviation with
a ``half_life_s`` half-life. Spike samples and samples taken while the alert is open do
not move the baseline, so a long spike cannot teach the baseline to accept itself.
"""

from __future__ import annotations

import statistics
from array import array
from dataclasses import dataclass, field

from translators.records import Record, SiftrSample, TcpCongState, TcpDebugSnapshot, TcpStateChange

from ..state import bounded_append
from .base import Context, Rule, endpoint, flow_key, who


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


class CwndCollapse(Rule):
    rule_id = "K6"
    kinds = ("siftr_sample", "tcpdebug_snapshot", "tcp_cong_state", "tcp_state")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.flows = self.flows_map()

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
        peak = f" from a peak of {previous_max:.0f}" if previous_max is not None else ""
        message = (
            f"The congestion window of {who(subject)} toward {endpoint(getattr(rec, 'dst', None), getattr(rec, 'dport', None))} "
            f"collapsed to {segs:.0f} segment{'s' if segs >= 2 else ''}{peak} "
            + (
                f"for {held:.1f} s"
                if held >= self.num("hold_s")
                else f"{repeats} times in {self.num('repeat_window_s'):g} s"
            )
            + " with data outstanding: a retransmission timeout or severe loss, and throughput drops to a trickle."
        )
        sampled = self.ctx.sampling.ratio(rec)  # H2: say when only every Nth packet was seen
        message += self.ctx.sampling.note(sampled)
        self.fire(
            "collapse", flow_key(rec), now=t, severity="warning", subject=subject, message=message,
            clear_after=2 * self.window, metric=segs, evidence=f.evidence or (), sampling=sampled,
        )  # fmt: skip


def _outstanding(rec: SiftrSample | TcpDebugSnapshot) -> bool:
    if rec.snd_nxt is not None and rec.snd_una is not None:
        return rec.snd_nxt != rec.snd_una
    if isinstance(rec, SiftrSample) and rec.sent_inflight_bytes is not None:
        return rec.sent_inflight_bytes > 0
    return bool(rec.packets_out)


@dataclass(slots=True)
class _Rtt:
    seed: array[float] | None = field(default_factory=lambda: array("d"))
    base: float | None = None
    dev: float = 0.0
    updated: float = 0.0
    consecutive: int = 0
    spike_since: float | None = None
    evidence: list[int] | None = None


class SrttSpike(Rule):
    rule_id = "K7"
    kinds = ("siftr_sample", "tcpdebug_snapshot", "tcp_state")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.flows = self.flows_map()

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
        f = self.flows.get_or_create(flow_key(rec), _Rtt)
        if f.base is None:
            self._seed(f, float(srtt), rec.ts_wall)
            return
        self._sample(rec, f, float(srtt))

    def _seed(self, f: _Rtt, srtt: float, t: float) -> None:
        assert f.seed is not None
        f.seed.append(srtt)
        if len(f.seed) >= self.num("seed_samples"):
            f.base = statistics.median(f.seed)
            f.dev = statistics.fmean(abs(x - f.base) for x in f.seed)
            f.updated = t
            f.seed = None

    def limit(self, base: float, dev: float) -> float:
        return max(self.num("factor") * base, base + self.num("dev_factor") * dev, base + self.num("floor_ms") * 1000)

    def _sample(self, rec: Record, f: _Rtt, srtt: float) -> None:
        assert f.base is not None
        t = rec.ts_wall
        limit = self.limit(f.base, f.dev)
        if srtt <= limit:
            f.consecutive, f.spike_since = 0, None
            if not self.ctx.book.is_open(self.rule_id, "spike", rec.host_id, flow_key(rec)):
                self._learn(f, srtt, t)
            return
        if f.spike_since is None:
            f.spike_since, f.evidence = t, None
        f.consecutive += 1
        f.evidence = bounded_append(f.evidence, rec.seq)
        held = t - f.spike_since
        # tcp_probe fires per received segment: 5 samples can span microseconds, so the
        # sample count only counts once the spike has also lasted min_hold_s
        by_count = f.consecutive >= self.num("consecutive") and held >= self.num("min_hold_s")
        if not by_count and held < self.num("hold_s"):
            return
        critical = srtt > f.base + self.num("critical_ms") * 1000
        subject = self.ctx.owner(rec)
        message = (
            f"The smoothed RTT of {who(subject)} toward {endpoint(getattr(rec, 'dst', None), getattr(rec, 'dport', None))} "
            f"rose to {srtt / 1000:.1f} ms against its own baseline of {f.base / 1000:.2f} ms "
            f"({f.consecutive} samples over the limit of {limit / 1000:.2f} ms): queueing on the path or a stalled "
            f"peer; beyond +200 ms retransmission timers start to interact."
        )
        sampled = self.ctx.sampling.ratio(rec)  # H2: say when only every Nth packet was seen
        message += self.ctx.sampling.note(sampled)
        self.fire(
            "spike", flow_key(rec), now=t, severity="critical" if critical else "warning", subject=subject,
            message=message, clear_after=2 * self.num("window_s"), metric=srtt, evidence=f.evidence or (),
            sampling=sampled,
        )  # fmt: skip

    def _learn(self, f: _Rtt, srtt: float, t: float) -> None:
        assert f.base is not None
        alpha = 1.0 - 0.5 ** (max(t - f.updated, 0.0) / self.num("half_life_s"))
        f.base += alpha * (srtt - f.base)
        f.dev += alpha * (abs(srtt - f.base) - f.dev)
        f.updated = t
