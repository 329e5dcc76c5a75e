"""K9 scans and SYN floods, K14 connect failures: rules on handshake outcomes.

A failed connection (Zeek's notion, anomalies.md K9) is learnt from:
- live, this host connecting: a peer RST in SYN_SENT (refused) or SYN_SENT -> CLOSED
  without one (timeout);
- live, this host connected to: a local reply RST for a closed port, or a NO_SOCKET
  skb drop (TCP or UDP), the originator being the remote address — unless the closed
  port belonged to a connection of this host with that same peer that closed within
  ``scan_window_s``: then the segment is a straggler of that connection (a SYN-ACK
  retry reaching a client that gave up, a retransmitted FIN), not an attempt;
- captures: ``connection`` summaries whose Zeek conn_state says the attempt failed.
Scans count distinct failed targets per originator in ``scan_window_s``; the SYN rules
count SYNs (``tcp_segment`` SYNs from captures, SYN_SENT transitions live) against
completed handshakes. K14 turns the same outcomes into a failure share per
destination service.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from translators.records import Connection, Record, SkbDrop, TcpReset, TcpSegment, TcpStateChange

from ..book import Subject
from ..outcomes import capture_outcome
from ..state import DistinctWindow, LruMap, Window
from .base import Context, Rule, endpoint, flow_key
from .connect_causes import Attempt, Causes, ConnectCauses

SYN, ACK = 0x02, 0x10
UNSPECIFIED = frozenset({"0.0.0.0", "::"})


@dataclass(slots=True)
class _Pending:
    refused: bool = False


class Handshakes:
    """Resolves live connect attempts (SYN_SENT) into success, refused or timeout."""

    def __init__(self, cap: int) -> None:
        self.pending: LruMap[object, _Pending] = LruMap(cap)

    def outcome(self, rec: Record) -> str | None:
        if isinstance(rec, TcpStateChange):
            if rec.state == "SYN_SENT":
                self.pending.get_or_create(flow_key(rec), _Pending)
                return None
            if rec.prev_state != "SYN_SENT":
                return None
            p = self.pending.pop(flow_key(rec))
            if rec.state == "ESTABLISHED":
                return "success"
            if rec.state == "CLOSED":
                return "refused" if p is not None and p.refused else "timeout"
            return None
        if isinstance(rec, TcpReset) and rec.sender == "peer" and rec.state == "SYN_SENT":
            p = self.pending.get_or_create(flow_key(rec), _Pending)
            p.refused = True
        return None


@dataclass(slots=True)
class _Syns:
    syns: Window
    done: Window
    evidence: list[int] = field(default_factory=list)


class ScanAndFlood(Rule):
    rule_id = "K9"
    kinds = ("tcp_state", "tcp_reset", "skb_drop", "connection", "tcp_segment")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.span = self.num("scan_window_s")
        self.handshakes = Handshakes(ctx.max_flows)
        self.ports = self.keys_map()  # (host, originator, target host, proto) -> distinct ports
        self.addrs = self.keys_map()  # (host, originator, port, proto) -> distinct hosts
        self.victims = self.keys_map()  # (host, dst, dport) -> SYNs / completions, per second
        self.origins = self.keys_map()  # (host, src) -> SYNs / completions, per minute
        self.closed: LruMap[tuple[str, str | None, int | None, str | None, int | None], float] = self.flows_map()

    def feed(self, rec: Record) -> None:
        if isinstance(rec, TcpStateChange):
            if rec.state == "CLOSED":  # local first: this host's end, then the peer
                self.closed.put((rec.host_id, rec.src, rec.sport, rec.dst, rec.dport), rec.ts_wall)
            self._live_state(rec)
        elif isinstance(rec, TcpReset):
            self.handshakes.outcome(rec)
            if rec.sender == "local" and not rec.active and rec.state in (None, "CLOSED", "LISTEN"):
                # a listener's RST carries the listener's own tuple (peer 0.0.0.0 / ::): the
                # originator is unknown, so it cannot count toward anyone's scan
                if rec.dst not in UNSPECIFIED and not self._straggler(rec, rec.src, rec.sport, rec.dst, rec.dport):
                    self._failed(rec, rec.dst, rec.src, rec.sport, "tcp")
        elif isinstance(rec, SkbDrop):
            if rec.drop_reason_str == "NO_SOCKET" and rec.l4_proto in ("tcp", "udp"):
                if rec.l4_proto == "udp" or not self._straggler(rec, rec.dst, rec.dport, rec.src, rec.sport):
                    self._failed(rec, rec.src, rec.dst, rec.dport, rec.l4_proto)
        elif isinstance(rec, Connection):
            out = capture_outcome(rec)
            if out is not None and out != "success":
                self._failed(rec, rec.src, rec.dst, rec.dport, "tcp")
        elif isinstance(rec, TcpSegment):
            self._segment(rec)

    def _live_state(self, rec: TcpStateChange) -> None:
        out = self.handshakes.outcome(rec)
        if rec.prev_state == "CLOSED" and rec.state == "SYN_SENT":
            self._syn_out(rec, rec.src)
        elif out == "success":
            self._origin(rec, rec.src).done.add(rec.ts_wall)
        elif out in ("refused", "timeout"):
            self._failed(rec, rec.src, rec.dst, rec.dport, "tcp")
        elif rec.prev_state == "SYN_RECEIVED" and rec.state == "ESTABLISHED":
            self._victim(rec, rec.src, rec.sport).done.add(rec.ts_wall)

    def _segment(self, rec: TcpSegment) -> None:
        flags = rec.tcp_flags or 0
        if flags & (SYN | ACK) == SYN:
            self._syn_out(rec, rec.src)
            self._syn_in(rec)
        elif flags & (SYN | ACK) == ACK and rec.direction == "orig" and rec.rel_seq == 1 and rec.rel_ack == 1:
            # the handshake's final ACK: the attempt completed
            self._origin(rec, rec.src).done.add(rec.ts_wall)
            self._victim(rec, rec.dst, rec.dport).done.add(rec.ts_wall)

    # --- scans -------------------------------------------------------------------------

    def _straggler(
        self, rec: Record, local: str | None, lport: int | None, peer: str | None, pport: int | None
    ) -> bool:
        """A segment for a connection of this host with this peer that closed recently."""
        closed = self.closed.peek((rec.host_id, local, lport, peer, pport))
        return closed is not None and rec.ts_wall - closed <= self.span

    def _failed(self, rec: Record, orig: str | None, target: str | None, port: int | None, proto: str) -> None:
        if orig is None or target is None or port is None:
            return
        t = rec.ts_wall
        host = rec.host_id
        cap_p = 2 * int(self.num("port_scan_ports"))
        cap_a = 2 * int(self.num("addr_scan_hosts"))
        ports = self.ports.get_or_create((host, orig, target, proto), lambda: DistinctWindow(self.span, cap_p))
        addrs = self.addrs.get_or_create((host, orig, port, proto), lambda: DistinctWindow(self.span, cap_a))
        n_ports = ports.add(t, port)
        n_addrs = addrs.add(t, target)
        if n_ports >= self.num("port_scan_ports"):
            sample = ", ".join(str(p) for p in sorted(ports.items())[:10])
            message = (
                f"{orig} made failed {proto.upper()} connection attempts to {n_ports} distinct ports of {target} "
                f"within {self.span:g} s (ports {sample}, ...): a port scan (Zeek's threshold is 15 ports)."
            )
            self._scan("port-scan", rec, (orig, target, proto), orig, target, None, proto, n_ports, message)
        if n_addrs >= self.num("addr_scan_hosts"):
            message = (
                f"{orig} made failed {proto.upper()} connection attempts to {n_addrs} distinct hosts on port {port} "
                f"within {self.span:g} s: an address scan (Zeek's threshold is 25 hosts)."
            )
            self._scan("addr-scan", rec, (orig, port, proto), orig, None, port, proto, n_addrs, message)

    def _scan(
        self, cond: str, rec: Record, key: object, orig: str, target: str | None, port: int | None,
        proto: str, n: int, message: str,
    ) -> None:  # fmt: skip
        subject = Subject(host_id=rec.host_id, boot_id=rec.boot_id, netns=rec.netns, proto=proto)
        subject.src, subject.dst, subject.dport = orig, target, port
        self.fire(
            cond, key, now=rec.ts_wall, severity="warning", subject=subject, message=message,
            clear_after=self.span, metric=float(n), evidence=[rec.seq],
        )  # fmt: skip

    # --- SYN flood and SYN scan ----------------------------------------------------------

    def _victim(self, rec: Record, dst: str | None, dport: int | None) -> _Syns:
        span = self.num("flood_seconds") + 1
        return self.victims.get_or_create(  # type: ignore[no-any-return]
            (rec.host_id, dst, dport), lambda: _Syns(Window(span), Window(span))
        )

    def _origin(self, rec: Record, src: str | None) -> _Syns:
        return self.origins.get_or_create((rec.host_id, src), lambda: _Syns(Window(60), Window(60)))  # type: ignore[no-any-return]

    def _syn_out(self, rec: Record, src: str | None) -> None:
        o = self._origin(rec, src)
        t = rec.ts_wall
        o.syns.add(t)
        if len(o.evidence) < 32:
            o.evidence.append(rec.seq)
        syns = o.syns.total(t)
        if syns <= self.num("syn_scan_per_min"):
            return
        ratio = o.done.total(t) / syns
        if ratio >= self.num("syn_scan_completion"):
            return
        subject = Subject(host_id=rec.host_id, boot_id=rec.boot_id, netns=rec.netns, proto="tcp", src=src)
        message = (
            f"{src} sent {int(syns)} SYNs in the last minute and only {ratio:.0%} completed a handshake: "
            f"a SYN scan (ntopng's threshold: more than 256 a minute, under 10 % completed)."
        )
        self.fire(
            "syn-scan", ("origin", src), now=t, severity="warning", subject=subject, message=message,
            clear_after=120.0, metric=syns, evidence=o.evidence,
        )  # fmt: skip

    def _syn_in(self, rec: TcpSegment) -> None:
        v = self._victim(rec, rec.dst, rec.dport)
        t = rec.ts_wall
        v.syns.add(t)
        if len(v.evidence) < 32:
            v.evidence.append(rec.seq)
        secs = int(self.num("flood_seconds"))
        rate = self.num("flood_rate")
        # every one of the last `secs` whole seconds above the rate (the current one may be partial)
        per_sec = v.syns.per_second(t, secs + 1)
        full = per_sec[:-1] if len(per_sec) > secs else per_sec
        if len(full) < secs or min(full) <= rate:
            return
        syns = sum(full)
        ratio = v.done.total(t) / v.syns.total(t)
        if ratio >= self.num("flood_completion"):
            return
        subject = Subject(host_id=rec.host_id, boot_id=rec.boot_id, netns=rec.netns, proto="tcp")
        subject.dst, subject.dport = rec.dst, rec.dport
        message = (
            f"{endpoint(rec.dst, rec.dport)} received {int(syns / secs)} SYNs per second for {secs} s with only "
            f"{ratio:.0%} of handshakes completed: a SYN flood that fills the SYN backlog and starves real clients."
        )
        self.fire(
            "syn-flood", ("victim", rec.dst, rec.dport), now=t, severity="critical", subject=subject,
            message=message, clear_after=2 * secs, metric=syns / secs, evidence=v.evidence,
        )  # fmt: skip


@dataclass(slots=True)
class _Service:
    resolved: Window
    outcomes: dict[str, Window]
    causes: Causes
    evidence: list[int] = field(default_factory=list)


class ConnectFailures(Rule):
    """K14: the failure share of connects per destination service, and why they failed
    (connect_causes.py: refused, SYNs dropped here with their reason, unanswered, early)."""

    rule_id = "K14"
    kinds = ("tcp_state", "tcp_reset", "connection", "skb_drop", "tcp_retransmit")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.connects = ConnectCauses(ctx.max_flows)
        self.services = self.keys_map()

    def feed(self, rec: Record) -> None:
        if isinstance(rec, Connection):
            out = capture_outcome(rec)
            if out is not None:
                self._resolved(rec, out)
            return
        ended = self.connects.feed(rec)
        if ended is None:
            return
        how, attempt = ended
        if how == "success":
            self._resolved(rec, "success")
            return
        cause = attempt.cause(rec.ts_wall) if attempt is not None else "unanswered"
        self._resolved(rec, "refused" if cause == "refused" else "timeout", cause, attempt)

    def _resolved(self, rec: Record, out: str, cause: str | None = None, attempt: Attempt | None = None) -> None:
        dst, dport = getattr(rec, "dst", None), getattr(rec, "dport", None)
        w = self.window
        svc = self.services.get_or_create(
            (rec.host_id, dst, dport),
            lambda: _Service(Window(w), {k: Window(w) for k in ("refused", "timeout", "reset")}, Causes(w)),
        )
        t = rec.ts_wall
        if cause is not None and attempt is not None:
            svc.causes.add(t, cause, attempt)
        svc.resolved.add(t)
        if out != "success":
            svc.outcomes[out].add(t)
            if len(svc.evidence) < 32:
                svc.evidence.append(rec.seq)
        resolved = svc.resolved.total(t)
        if resolved < self.num("min_attempts") or not svc.evidence:
            return
        counts = {k: int(v.total(t)) for k, v in svc.outcomes.items()}
        failed = sum(counts.values())
        share = failed / resolved
        if share <= self.num("failure_share"):
            return
        subject = self.ctx.owner(rec)
        subject.conn_uuid = subject.sock_cookie = None
        subject.src = subject.sport = None
        subject.dst, subject.dport = dst, dport  # a capture's Connection summary is no FlowRecord
        message = (
            f"{failed} of {int(resolved)} connection attempts to {endpoint(dst, dport)} failed in {w:g} s "
            f"({share:.0%}: {counts['refused']} refused by RST, {counts['timeout']} timed out, {counts['reset']} "
            f"reset before any data): clients of this service see errors." + svc.causes.sentence(t, dst, dport)
        )
        sev = "critical" if share > self.num("critical_share") else "warning"
        self.fire(
            "connect-failures", ("service", dst, dport), now=t, severity=sev, subject=subject, message=message,
            clear_after=2 * w, metric=share, evidence=svc.evidence, bump=out != "success",
        )  # fmt: skip
