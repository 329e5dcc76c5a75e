"""K8 half-open and stuck handshakes, K10 sockets stuck in CLOSE_WAIT / FIN_WAIT_2 and
TIME_WAIT pile-ups (anomalies.md 4), from ``tcp_state`` transitions and sweeps.

Sockets currently in SYN_SENT, CLOSE_WAIT or FIN_WAIT_2 sit in insertion-ordered maps
(oldest first, records arrive in time order), so a sweep only walks the sockets that
are old enough plus one. Each map is an LRU with the per-flow cap.
"""

from __future__ import annotations

import functools
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from translators.records import Connection, Record, TcpReset, TcpRetransmit, TcpStateChange

from ..book import Subject
from ..state import DistinctWindow, LruMap, Window
from .base import Context, Rule, endpoint, flow_key, who


@dataclass(slots=True)
class _Stuck:
    """A socket in a watched state; the subject carries host, tuple and owner (not the record)."""

    since: float
    seq: int
    subject: Subject
    reset: bool = False
    fired: bool = False


Leave = Callable[[str, object, _Stuck, float], None]


class StateTracker:
    """Which watched state each socket is in, since when, and which are due for an alert.

    ``maps`` holds every socket in a watched state (LRU, capped); ``pending`` the ones
    not yet reported, oldest first, so a sweep pops only the newly overdue. When a
    reported socket leaves its state (or is evicted), ``on_leave`` lets the rule release
    its held alert.
    """

    def __init__(self, watched: tuple[str, ...], cap: int, ctx: Context, on_leave: Leave | None = None) -> None:
        self.ctx = ctx
        self.on_leave = on_leave
        self.pending: dict[str, OrderedDict[object, _Stuck]] = {s: OrderedDict() for s in watched}
        self.maps: dict[str, LruMap[object, _Stuck]] = {
            s: LruMap(cap, on_evict=functools.partial(self._evicted, s)) for s in watched
        }

    def change(self, rec: TcpStateChange) -> _Stuck | None:
        """Apply a transition; returns the entry the socket left, if it was watched."""
        key = flow_key(rec)
        left = self._leave(rec.prev_state, key, rec.ts_wall)
        if rec.state in self.maps:
            entry = _Stuck(rec.ts_wall, rec.seq, self.ctx.owner(rec))
            self.maps[rec.state].put(key, entry)
            self.pending[rec.state][key] = entry
        return left

    def forget(self, rec: Record) -> None:
        key = flow_key(rec)
        for state in self.maps:
            self._leave(state, key, rec.ts_wall)

    def due(self, state: str, cutoff: float) -> list[tuple[object, _Stuck]]:
        """Sockets in ``state`` since ``cutoff`` or earlier and not yet reported; marks them reported."""
        out = []
        pending = self.pending[state]
        while pending:
            key, entry = next(iter(pending.items()))
            if entry.since > cutoff:
                break
            pending.popitem(last=False)
            entry.fired = True
            out.append((key, entry))
        return out

    def _leave(self, state: str, key: object, now: float) -> _Stuck | None:
        if state not in self.maps:
            return None
        entry = self.maps[state].pop(key)
        self.pending[state].pop(key, None)
        if entry is not None and self.on_leave is not None:
            self.on_leave(state, key, entry, now)
        return entry

    def _evicted(self, state: str, key: object, entry: _Stuck) -> None:
        self.pending[state].pop(key, None)
        if self.on_leave is not None:
            self.on_leave(state, key, entry, entry.since)


INF = float("inf")


class HalfOpen(Rule):
    rule_id = "K8"
    kinds = ("tcp_state", "tcp_reset", "tcp_retransmit")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.states = StateTracker(("SYN_SENT",), ctx.max_flows, ctx, self._left)
        self.listeners = self.keys_map()
        self.stuck_per_dest: Counter[tuple[str, str, str | None, int | None]] = Counter()

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

    @staticmethod
    def _dest(entry: _Stuck) -> tuple[str, str, str | None, int | None]:
        return (entry.subject.host_id, entry.subject.boot_id, entry.subject.dst, entry.subject.dport)

    def _left(self, state: str, key: object, entry: _Stuck, now: float) -> None:
        if entry.fired:
            self.ctx.book.release(self.rule_id, "syn-sent", entry.subject.host_id, key, now, 2 * self.window)
            dest = self._dest(entry)
            self.stuck_per_dest[dest] -= 1
            if self.stuck_per_dest[dest] <= 0:
                del self.stuck_per_dest[dest]

    def _timeout(self, rec: TcpStateChange, left: _Stuck) -> None:
        waited = rec.ts_wall - left.since
        message = (
            f"{who(left.subject)} gave up connecting to {endpoint(rec.dst, rec.dport)} after {waited:.1f} s without "
            f"any answer (no SYN-ACK, no RST): a connect timeout, the peer or the path is dropping SYNs."
        )
        self.fire(
            "connect-timeout", flow_key(rec), now=rec.ts_wall, severity="notice", subject=left.subject,
            message=message, clear_after=2 * self.window, metric=waited, evidence=[left.seq, rec.seq],
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
        for key, entry in self.states.due("SYN_SENT", now - limit):
            self.stuck_per_dest[self._dest(entry)] += 1
            message = (
                f"{who(entry.subject)} has been waiting {now - entry.since:.1f} s in SYN_SENT for "
                f"{endpoint(entry.subject.dst, entry.subject.dport)}: past the first SYN retry, connect latency is already "
                f"over a second and the kernel only gives up after about 127 s."
            )
            self.fire(
                "syn-sent", key, now=now, severity="notice", subject=entry.subject, message=message,
                clear_after=INF, metric=now - entry.since, evidence=[entry.seq],
            )  # fmt: skip
        for (host, boot, dst, dport), n in self.stuck_per_dest.items():
            if n <= self.num("per_destination"):
                continue
            subject = Subject(host_id=host, boot_id=boot, proto="tcp", dst=dst, dport=dport)
            message = (
                f"{n} sockets on this host are stuck in SYN_SENT toward {endpoint(dst, dport)} for more than "
                f"{limit:g} s: the destination is unreachable or overloaded, and every caller is waiting on it."
            )
            self.fire(
                "syn-sent-destination", ("dest", dst, dport), now=now, severity="warning", subject=subject,
                message=message, clear_after=2 * self.window, metric=float(n), bump=False,
            )  # fmt: skip


class StuckClose(Rule):
    rule_id = "K10"
    kinds = ("tcp_state", "connection")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.sweep = self.num("sweep_s")
        self.states = StateTracker(("CLOSE_WAIT", "FIN_WAIT_2"), ctx.max_flows, ctx, self._left)
        self.time_wait = self.keys_map()
        self.close_wait_owners: Counter[tuple[str, str, int, str | None]] = Counter()
        self.next_sweep = 0.0

    def feed(self, rec: Record) -> None:
        if isinstance(rec, TcpStateChange):
            self.states.change(rec)
            if rec.state == "CLOSE_WAIT":
                owner = self._owner(self.ctx.owner(rec))
                if owner is not None:
                    self.close_wait_owners[owner] += 1
            elif rec.state == "TIME_WAIT":
                self._time_wait(rec)
        elif isinstance(rec, Connection) and rec.source == "kernel":
            self.states.forget(rec)

    @staticmethod
    def _owner(s: Subject) -> tuple[str, str, int, str | None] | None:
        pid = s.tgid or s.pid
        return None if pid is None else (s.host_id, s.boot_id, pid, s.comm)

    def _left(self, state: str, key: object, entry: _Stuck, now: float) -> None:
        if state == "CLOSE_WAIT":
            owner = self._owner(entry.subject)
            if owner is not None:
                self.close_wait_owners[owner] -= 1
                if self.close_wait_owners[owner] <= 0:
                    del self.close_wait_owners[owner]
        if entry.fired:
            cond = state.lower().replace("_", "-")
            self.ctx.book.release(self.rule_id, cond, entry.subject.host_id, key, now, 2 * self.sweep)

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
        for key, entry in self.states.due(state, now - limit):
            age = now - entry.since
            peer = endpoint(entry.subject.dst, entry.subject.dport)
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
                message=message, clear_after=INF, metric=age, evidence=[entry.seq],
            )  # fmt: skip

    def _per_process(self, now: float) -> None:
        for (host, boot, pid, comm), n in self.close_wait_owners.items():
            if n <= self.num("close_wait_per_process"):
                continue
            subject = Subject(host_id=host, boot_id=boot, pid=pid, tgid=pid, comm=comm, proto="tcp")
            message = (
                f"{who(subject)} holds {n} sockets in CLOSE_WAIT: their peers have closed and the process never "
                f"closes them, leaking file descriptors until it hits its limit."
            )
            self.fire(
                "close-wait-process", ("process", pid, comm), now=now, severity="warning", subject=subject,
                message=message, clear_after=2 * self.sweep, metric=float(n), bump=False,
            )  # fmt: skip
