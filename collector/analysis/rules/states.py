"""K8 half-open and stuck handshakes, K10 sockets stuck in CLOSE_WAIT / FIN_WAIT_2 and
TIME_WAIT pile-ups (anomalies.md 4), from ``tcp_state`` transitions and sweeps.

Sockets currently in SYN_SENT, CLOSE_WAIT or FIN_WAIT_2 sit in insertion-ordered maps
(oldest first, records arrive in time order), so a sweep only walks the sockets that
are old enough plus one. Each map is an LRU with the per-flow cap.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from translators.records import Connection, Record, TcpReset, TcpRetransmit, TcpStateChange

from ..book import Subject
from ..state import DistinctWindow, LruMap, Window
from .base import Context, Rule, endpoint, flow_key, who


@dataclass(slots=True)
class _Stuck:
    since: float
    rec: TcpStateChange
    subject: Subject
    reset: bool = False
    evidence: list[int] = field(default_factory=list)


class StateTracker:
    """Which watched state each socket is in, and since when."""

    def __init__(self, watched: tuple[str, ...], cap: int, ctx: Context) -> None:
        self.ctx = ctx
        self.maps: dict[str, LruMap[object, _Stuck]] = {s: LruMap(cap) for s in watched}

    def change(self, rec: TcpStateChange) -> _Stuck | None:
        """Apply a transition; returns the entry the socket left, if it was watched."""
        key = flow_key(rec)
        left = self.maps[rec.prev_state].pop(key) if rec.prev_state in self.maps else None
        if rec.state in self.maps:
            self.maps[rec.state].put(key, _Stuck(rec.ts_wall, rec, self.ctx.owner(rec), evidence=[rec.seq]))
        return left

    def forget(self, rec: Record) -> None:
        key = flow_key(rec)
        for m in self.maps.values():
            m.pop(key)

    def older_than(self, state: str, cutoff: float) -> list[tuple[object, _Stuck]]:
        out = []
        for key, entry in self.maps[state].items():
            if entry.since > cutoff:
                break
            out.append((key, entry))
        return out


class HalfOpen(Rule):
    rule_id = "K8"
    kinds = ("tcp_state", "tcp_reset", "tcp_retransmit")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.states = StateTracker(("SYN_SENT",), ctx.max_flows, ctx)
        self.listeners = self.keys_map()

    def feed(self, rec: Record) -> None:
        if isinstance(rec, TcpStateChange):
            left = self.states.change(rec)
            if left is not None and rec.state == "CLOSED" and not left.reset:
                self._timeout(rec, left)
            if rec.prev_state == "SYN_RECEIVED" and rec.state == "ESTABLISHED":
                lst = self.listeners.peek((rec.host_id, rec.src, rec.sport))
                if lst is not None:
                    lst.discard((rec.dst, rec.dport))
        elif isinstance(rec, TcpReset):
            entry = self.states.maps["SYN_SENT"].peek(flow_key(rec))
            if entry is not None and rec.sender == "peer":
                entry.reset = True
        elif isinstance(rec, TcpRetransmit):
            if rec.retrans_kind == "synack" or rec.state == "SYN_RECEIVED" or "synack" in rec.probe:
                self._synack(rec)

    def _timeout(self, rec: TcpStateChange, left: _Stuck) -> None:
        waited = rec.ts_wall - left.since
        message = (
            f"{who(left.subject)} gave up connecting to {endpoint(rec.dst, rec.dport)} after {waited:.1f} s without "
            f"any answer (no SYN-ACK, no RST): a connect timeout, the peer or the path is dropping SYNs."
        )
        self.fire(
            "connect-timeout", flow_key(rec), now=rec.ts_wall, severity="notice", subject=left.subject,
            message=message, clear_after=2 * self.window, metric=waited, evidence=[*left.evidence, rec.seq],
        )  # fmt: skip

    def _synack(self, rec: TcpRetransmit) -> None:
        w = self.window
        cap = 2 * int(self.num("synack_max")) + 2
        lst = self.listeners.get_or_create((rec.host_id, rec.src, rec.sport), lambda: DistinctWindow(w, cap))
        n = lst.add(rec.ts_wall, (rec.dst, rec.dport))
        if n <= self.num("synack_max"):
            return
        subject = self.ctx.owner(rec)
        subject.conn_uuid = subject.sock_cookie = None
        subject.dst = subject.dport = None
        message = (
            f"The listener {endpoint(rec.src, rec.sport)} is retrying SYN-ACKs to {n} clients in {w:g} s that "
            f"never completed the handshake: server-side half-open connections (a SYN flood, or asymmetric "
            f"routing losing the final ACK)."
        )
        self.fire(
            "server-half-open", ("listener", rec.src, rec.sport), now=rec.ts_wall, severity="warning",
            subject=subject, message=message, clear_after=2 * w, metric=float(n), evidence=[rec.seq],
        )  # fmt: skip

    def tick(self, now: float) -> None:
        limit = self.num("syn_sent_s")
        stuck = self.states.older_than("SYN_SENT", now - limit)
        per_dest: Counter[tuple[str, str | None, int | None]] = Counter()
        for key, entry in stuck:
            per_dest[(entry.rec.host_id, entry.rec.dst, entry.rec.dport)] += 1
            message = (
                f"{who(entry.subject)} has been waiting {now - entry.since:.1f} s in SYN_SENT for "
                f"{endpoint(entry.rec.dst, entry.rec.dport)}: past the first SYN retry, connect latency is already "
                f"over a second and the kernel only gives up after about 127 s."
            )
            self.fire(
                "syn-sent", key, now=now, severity="notice", subject=entry.subject, message=message,
                clear_after=2 * self.window, metric=now - entry.since, evidence=entry.evidence, bump=False,
            )  # fmt: skip
        for (host, dst, dport), n in per_dest.items():
            if n <= self.num("per_destination"):
                continue
            first = next(e for _k, e in stuck if e.rec.dst == dst and e.rec.dport == dport)
            subject = Subject(
                host_id=host, boot_id=first.rec.boot_id, netns=first.rec.netns, proto="tcp", dst=dst, dport=dport
            )
            message = (
                f"{n} sockets on this host are stuck in SYN_SENT toward {endpoint(dst, dport)} for more than "
                f"{limit:g} s: the destination is unreachable or overloaded, and every caller is waiting on it."
            )
            self.fire(
                "syn-sent-destination", ("dest", dst, dport), now=now, severity="warning", subject=subject,
                message=message, clear_after=2 * self.window, metric=float(n), evidence=first.evidence, bump=False,
            )  # fmt: skip


class StuckClose(Rule):
    rule_id = "K10"
    kinds = ("tcp_state", "connection")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.sweep = self.num("sweep_s")
        self.states = StateTracker(("CLOSE_WAIT", "FIN_WAIT_2"), ctx.max_flows, ctx)
        self.time_wait = self.keys_map()
        self.next_sweep = 0.0

    def feed(self, rec: Record) -> None:
        if isinstance(rec, TcpStateChange):
            self.states.change(rec)
            if rec.state == "TIME_WAIT":
                self._time_wait(rec)
        elif isinstance(rec, Connection) and rec.source == "kernel":
            self.states.forget(rec)

    def _time_wait(self, rec: TcpStateChange) -> None:
        span = self.num("time_wait_s")
        w = self.time_wait.get_or_create((rec.host_id, rec.dst, rec.dport), lambda: Window(span))
        w.add(rec.ts_wall)
        n = w.total(rec.ts_wall)
        limit = self.num("time_wait_share") * self.num("ephemeral_ports")
        if n <= limit:
            return
        subject = Subject(
            host_id=rec.host_id, boot_id=rec.boot_id, netns=rec.netns, proto="tcp", dst=rec.dst, dport=rec.dport
        )
        message = (
            f"{int(n)} connections to {endpoint(rec.dst, rec.dport)} entered TIME_WAIT in the last {span:g} s, more "
            f"than {self.num('time_wait_share'):.0%} of the ephemeral port range: new connections to it will soon "
            f"fail to find a free local port."
        )
        self.fire(
            "time-wait", ("dest", rec.dst, rec.dport), now=rec.ts_wall, severity="warning", subject=subject,
            message=message, clear_after=2 * span, metric=n, evidence=[rec.seq],
        )  # fmt: skip

    def tick(self, now: float) -> None:
        if now < self.next_sweep:
            return
        self.next_sweep = now + self.sweep
        self._stuck(now, "CLOSE_WAIT", self.num("close_wait_s"))
        self._stuck(now, "FIN_WAIT_2", self.num("fin_wait2_s"))
        self._per_process(now)

    def _stuck(self, now: float, state: str, limit: float) -> None:
        for key, entry in self.states.older_than(state, now - limit):
            age = now - entry.since
            peer = endpoint(entry.rec.dst, entry.rec.dport)
            if state == "CLOSE_WAIT":
                why = (
                    f"the peer {peer} closed its side and {who(entry.subject)} never called close(): "
                    f"a file-descriptor leak"
                )
            else:
                why = (
                    f"{who(entry.subject)} closed its side and the peer {peer} never sent its FIN: a half-closed "
                    f"connection the peer forgot, or a peer bug"
                )
            message = f"A socket has been in {state} for {age:.0f} s (limit {limit:g} s): {why}."
            self.fire(
                state.lower().replace("_", "-"), key, now=now, severity="notice", subject=entry.subject,
                message=message, clear_after=2 * self.sweep, metric=age, evidence=entry.evidence, bump=False,
            )  # fmt: skip

    def _per_process(self, now: float) -> None:
        owners: Counter[tuple[str, int | None, str | None]] = Counter()
        sample: dict[tuple[str, int | None, str | None], _Stuck] = {}
        for _key, entry in self.states.maps["CLOSE_WAIT"].items():
            s = entry.subject
            if s.pid is None:
                continue
            owner: tuple[str, int | None, str | None] = (s.host_id, s.tgid or s.pid, s.comm)
            owners[owner] += 1
            sample.setdefault(owner, entry)
        for owner, n in owners.items():
            if n <= self.num("close_wait_per_process"):
                continue
            first = sample[owner]
            subject = Subject(
                host_id=owner[0], boot_id=first.rec.boot_id, pid=first.subject.pid, tgid=first.subject.tgid,
                comm=owner[2], proto="tcp",
            )  # fmt: skip
            message = (
                f"{who(subject)} holds {n} sockets in CLOSE_WAIT: their peers have closed and the process never "
                f"closes them, leaking file descriptors until it hits its limit."
            )
            self.fire(
                "close-wait-process", ("process", owner[1], owner[2]), now=now, severity="warning", subject=subject,
                message=message, clear_after=2 * self.sweep, metric=float(n), evidence=first.evidence, bump=False,
            )  # fmt: skip
