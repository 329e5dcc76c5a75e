"""K1 retransmission ratio per connection and K2 retransmission type (anomalies.md 4).

K1 counts ``tcp_retransmit`` records against the segments the connection sent: exact
``flow_counters`` packets_out deltas when the collector keeps them, otherwise new-data
segments estimated from snd_nxt progress ÷ MSS in siftr/tcpdebug samples plus the
retransmits themselves. Without either source the ratio is unknown and K1 stays quiet.

K2 classifies each retransmit: explicit ``retrans_kind``, else SYN_SENT -> SYN retry,
SYN_RECEIVED or the synack probe -> SYN-ACK retry, ca_state Loss -> RTO, Recovery ->
fast. Timeouts are counted from both signals, Loss entries (``tcp_cong_state``) and
RTO-classified retransmits: a signal starts a new timeout when it comes at least
``rto_gap_s`` after the previous one (a timer cannot fire again sooner than the minimum
RTO of 200 ms, while a Loss entry, its retransmit and the rest of that recovery follow
each other within an RTT). Either signal alone suffices when the collector misses the
other. Timeouts and SYN retries are one finding per destination (issue 34 item 1: 99
per-connection alerts for one overflowing listener), listing the connections it struck
(groups.py); its severity follows the worst connection's count.
"""

from __future__ import annotations

from dataclasses import dataclass

from translators.records import (
    FlowCounters,
    Record,
    SiftrSample,
    TcpCongState,
    TcpDebugSnapshot,
    TcpRetransmit,
    TcpStateChange,
)

from ..state import DistinctWindow, Window, bounded_append
from .base import Context, Rule, endpoint, flow_key, who
from .groups import Groups, callers, target_subject


@dataclass(slots=True)
class _SentFlow:
    retrans: Window
    sent: Window
    evidence: list[int] | None = None
    last_nxt: int | None = None
    counters_out: int | None = None
    known: bool = False
    crit_since: float | None = None


class RetransRatio(Rule):
    rule_id = "K1"
    kinds = ("tcp_retransmit", "siftr_sample", "tcpdebug_snapshot", "flow_counters")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.state = self.flows_map()

    def _flow(self, rec: Record) -> _SentFlow:
        w = self.window
        return self.state.get_or_create(flow_key(rec), lambda: _SentFlow(Window(w), Window(w)))  # type: ignore[no-any-return]

    def feed(self, rec: Record) -> None:
        if isinstance(rec, TcpRetransmit):
            if rec.state in ("SYN_SENT", "SYN_RECEIVED") or rec.retrans_kind in ("syn", "synack"):
                return  # handshake retries are K2's and K8's business, not data loss
            f = self._flow(rec)
            f.retrans.add(rec.ts_wall)
            if f.counters_out is None:
                f.sent.add(rec.ts_wall)  # snd_nxt progress excludes retransmits
            f.evidence = bounded_append(f.evidence, rec.seq, 32)
            self._evaluate(rec, f)
        elif isinstance(rec, FlowCounters):
            if rec.proto == "tcp":
                self._counters(rec)
        elif isinstance(rec, SiftrSample | TcpDebugSnapshot):
            self._sample(rec)

    def _counters(self, rec: FlowCounters) -> None:
        f = self._flow(rec)
        if f.counters_out is not None and rec.packets_out >= f.counters_out:
            f.sent.add(rec.ts_wall, rec.packets_out - f.counters_out)
        f.counters_out = rec.packets_out
        f.known = True

    def _sample(self, rec: SiftrSample | TcpDebugSnapshot) -> None:
        if rec.snd_nxt is None or not rec.mss:
            return
        f = self._flow(rec)
        f.known = True
        if f.counters_out is None and f.last_nxt is not None:
            delta = (rec.snd_nxt - f.last_nxt) & 0xFFFFFFFF
            if 0 < delta < 1 << 31:
                f.sent.add(rec.ts_wall, -(-delta // rec.mss))
        f.last_nxt = rec.snd_nxt

    def _evaluate(self, rec: TcpRetransmit, f: _SentFlow) -> None:
        if not f.known:
            return
        t = rec.ts_wall
        retrans, sent = f.retrans.total(t), f.sent.total(t)
        if sent <= 0:
            return
        ratio = retrans / sent
        crit = self.num("critical_ratio")
        if ratio > crit:
            f.crit_since = t if f.crit_since is None else f.crit_since
        else:
            f.crit_since = None
        if retrans < self.num("min_retrans") or ratio <= self.num("min_ratio"):
            return
        sustained = f.crit_since is not None and t - f.crit_since >= self.num("critical_windows") * self.window
        subject = self.ctx.owner(rec)
        # without the socket's own count of segments sent, it is estimated: said so
        of = (
            f"{int(sent)} segments"
            if f.counters_out is not None
            else f"about {int(sent)} segments (estimated from the send sequence / MSS)"
        )
        message = (
            f"{who(subject)} retransmitted {int(retrans)} of {of} ({ratio:.1%}) to "
            f"{endpoint(rec.dst, rec.dport)} in the last {self.window:g} s: sustained loss on this path "
            f"cuts throughput (threshold {self.num('min_ratio'):.0%} with at least {self.num('min_retrans'):g})."
        )
        self.fire(
            "ratio", flow_key(rec), now=t, severity="critical" if sustained else "warning", subject=subject,
            message=message, clear_after=2 * self.window, metric=ratio, evidence=f.evidence or (),
        )  # fmt: skip


@dataclass(slots=True)
class _KindFlow:
    ca_state: str | None = None
    last_rto_signal: float | None = None
    rto_times: list[float] | None = None
    rto_evidence: list[int] | None = None
    syn_retries: int = 0
    syn_evidence: list[int] | None = None
    handshake: bool = False  # in SYN_SENT: a timeout there is a SYN retry, not a data RTO


@dataclass(slots=True)
class _Listener:
    retried: DistinctWindow[object]
    established: Window


class RetransKind(Rule):
    rule_id = "K2"
    kinds = ("tcp_retransmit", "tcp_cong_state", "tcp_state")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.state = self.flows_map()
        self.listeners = self.keys_map()
        self.groups = Groups(self.rule_id, ctx.book, ctx.max_keys)

    def _flow(self, rec: Record) -> _KindFlow:
        return self.state.get_or_create(flow_key(rec), _KindFlow)  # type: ignore[no-any-return]

    def feed(self, rec: Record) -> None:
        if isinstance(rec, TcpCongState):
            f = self._flow(rec)
            f.ca_state = rec.ca_state
            if rec.ca_state == "Loss" and not f.handshake:
                self._rto_signal(rec, f)
        elif isinstance(rec, TcpRetransmit):
            self._retransmit(rec)
        elif isinstance(rec, TcpStateChange):
            if rec.state == "SYN_SENT":
                self._flow(rec).handshake = True
            elif rec.prev_state == "SYN_SENT" and (known := self.state.peek(flow_key(rec))) is not None:
                known.handshake = False
            if rec.prev_state == "SYN_RECEIVED" and rec.state == "ESTABLISHED":
                self._listener(rec.host_id, rec.src, rec.sport).established.add(rec.ts_wall)
            elif rec.state == "CLOSED":
                self.state.pop(flow_key(rec))

    def classify(self, rec: TcpRetransmit, f: _KindFlow | None) -> str:
        if rec.retrans_kind not in (None, "unknown"):
            return rec.retrans_kind
        if rec.state == "SYN_SENT":
            return "syn"
        if rec.state == "SYN_RECEIVED" or "synack" in rec.probe:
            return "synack"
        ca = rec.ca_state or (f.ca_state if f is not None else None)
        return {"Loss": "rto", "Recovery": "fast"}.get(ca or "", "unknown")

    def _retransmit(self, rec: TcpRetransmit) -> None:
        known = self.state.peek(flow_key(rec))
        kind = self.classify(rec, known)
        if kind == "syn":
            self._syn_retry(rec, self._flow(rec))
        elif kind == "synack":
            self._synack(rec)
        elif kind == "rto":
            self._rto_signal(rec, self._flow(rec))

    def _rto_signal(self, rec: Record, f: _KindFlow) -> None:
        last, f.last_rto_signal = f.last_rto_signal, rec.ts_wall
        if last is None or rec.ts_wall - last >= self.num("rto_gap_s"):
            self._rto(rec, f)

    def _rto(self, rec: Record, f: _KindFlow) -> None:
        t = rec.ts_wall
        f.rto_times = [x for x in f.rto_times or () if x > t - self.window][-63:] + [t]
        f.rto_evidence = bounded_append(f.rto_evidence, rec.seq)
        n = len(f.rto_times)
        subject = self.ctx.owner(rec)
        target = ("dest", subject.dst, subject.dport)  # the path and peer an engineer fixes
        g = self.groups.join("rto", target, subject, flow_key(rec), subject.conn_uuid, float(n), target_subject)
        worst = int(g.peak)
        peer = endpoint(subject.dst, subject.dport)
        message = (
            f"{callers(g.subject, g.total)} toward {peer} hit retransmission timeouts (RTO, Loss state), up to "
            f"{worst} in {self.window:g} s on one connection (the latest {n}): each timeout stalls a connection for "
            f"at least 200 ms and doubles the next wait, unlike fast retransmit."
        ) + self.ctx.pmtu_cause(rec.host_id, subject.dst)
        self.fire(
            "rto", target, now=t, severity="warning" if worst >= self.num("rto_warning") else "notice",
            subject=g.subject, message=message, clear_after=2 * self.window, metric=float(worst),
            evidence=f.rto_evidence, members=g.total, member_conn_uuids=g.conns,
        )  # fmt: skip

    def _syn_retry(self, rec: TcpRetransmit, f: _KindFlow) -> None:
        f.syn_retries += 1
        f.syn_evidence = bounded_append(f.syn_evidence, rec.seq)
        n = f.syn_retries
        if n < self.num("syn_retry_notice"):
            return
        subject = self.ctx.owner(rec)
        target = ("dest", rec.dst, rec.dport)  # the destination service the callers wait on
        g = self.groups.join("syn-retry", target, subject, flow_key(rec), subject.conn_uuid, float(n), target_subject)
        worst = int(g.peak)
        message = (
            f"{callers(g.subject, g.total)} resent their SYN to {endpoint(rec.dst, rec.dport)}, up to {worst} "
            f"time{'s' if worst > 1 else ''}: the first retry alone adds about 1 s to connect latency, and each "
            f"further retry doubles the wait."
        )
        self.fire(
            "syn-retry", target, now=rec.ts_wall,
            severity="warning" if worst >= self.num("syn_retry_warning") else "notice", subject=g.subject,
            message=message, clear_after=2 * self.window, metric=float(worst), evidence=f.syn_evidence,
            members=g.total, member_conn_uuids=g.conns,
        )  # fmt: skip

    def _listener(self, host: str, addr: str | None, port: int | None) -> _Listener:
        w = self.window
        cap = 4 * int(self.num("synack_min_syns")) + 1024
        return self.listeners.get_or_create(  # type: ignore[no-any-return]
            (host, addr, port), lambda: _Listener(DistinctWindow(w, cap), Window(w))
        )

    def _synack(self, rec: TcpRetransmit) -> None:
        lst = self._listener(rec.host_id, rec.src, rec.sport)
        t = rec.ts_wall
        retried = lst.retried.add(t, (rec.dst, rec.dport))
        syns = retried + lst.established.total(t)
        if syns < self.num("synack_min_syns"):
            return
        share = retried / syns
        if share <= self.num("synack_share"):
            return
        subject = self.ctx.owner(rec)
        subject.conn_uuid = subject.sock_cookie = None
        subject.dst = subject.dport = None
        message = (
            f"The listener {endpoint(rec.src, rec.sport)} had to resend its SYN-ACK to {retried} of about "
            f"{int(syns)} connecting clients ({share:.0%}) in {self.window:g} s: clients are not completing "
            f"handshakes (lost final ACKs, a SYN flood or asymmetric routing)."
        )
        self.fire(
            "synack-share", ("listener", rec.src, rec.sport), now=t, severity="warning", subject=subject,
            message=message, clear_after=2 * self.window, metric=share, evidence=[rec.seq],
        )  # fmt: skip
