"""K8 half-open and stuck handshakes (anomalies.md 4), from ``tcp_state`` transitions and
sweeps, and the tracker of sockets held in a state that K10 (stuck_close.py) shares.

Sockets currently in SYN_SENT, CLOSE_WAIT or FIN_WAIT_2 sit in insertion-ordered maps
(oldest first, records arrive in time order), so a sweep only walks the sockets that
are old enough plus one. Each map is an LRU with the per-flow cap.
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from translators.records import Record, SockEvent, TcpReset, TcpRetransmit, TcpStateChange

from ..book import MAX_MEMBER_CONNS, Subject
from ..state import DistinctWindow, LruMap
from .base import Context, Rule, endpoint, flow_key
from .connect_causes import Attempt, ConnectCauses, timeout_cause
from .groups import Groups, callers, target_subject
from .listen_overflow import FullListeners, is_full_listener

Owner = tuple[str, str, int, str | None]
GroupKey = tuple[object, ...]


@dataclass(slots=True)
class _Group:
    """A fix target's sockets in a held state, oldest first, and how many ever joined."""

    subject: Subject
    sockets: OrderedDict[object, _Stuck]
    joined: int = 0
    fired: bool = False


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
PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
DEFAULT_EPHEMERAL = 60999 - 32768 + 1  # Linux's default range, when the sysctl cannot be read


def ephemeral_range_size(path: Path = PORT_RANGE) -> int:
    """Ports in net.ipv4.ip_local_port_range of this process's network namespace."""
    try:
        low, high = (int(x) for x in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return max(1, high - low + 1)


class HalfOpen(Rule):
    """K8. Stuck connects are one finding per destination (issue 34 item 1): its members are
    the sockets waiting in SYN_SENT past ``syn_sent_s`` now (a warning above
    ``per_destination``), and connect timeouts another per destination (groups.py)."""

    rule_id = "K8"
    kinds = ("tcp_state", "tcp_reset", "tcp_retransmit", "sock_event", "skb_drop")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.states = StateTracker(("SYN_SENT",), ctx.max_flows, ctx, self._left)
        self.listeners = self.keys_map()
        self.dests: dict[GroupKey, _Group] = {}  # bounded: members are the tracker's entries
        self.timeouts = Groups(self.rule_id, ctx.book, ctx.max_keys)
        self.full = FullListeners(ctx.max_keys, 1.0)  # K4's listeners: a connect's SYNs dropped on this host
        self.connects = ConnectCauses(ctx.max_flows)  # SYNs dropped here, with their reason

    def feed(self, rec: Record) -> None:
        ended = None if isinstance(rec, SockEvent) else self.connects.feed(rec)
        if is_full_listener(rec):
            self.full.observe(rec)
        elif isinstance(rec, TcpStateChange):
            if rec.state == "ESTABLISHED":
                self.full.note_local(rec)
            left = self.states.change(rec)
            if left is not None and rec.state == "CLOSED" and not left.reset:
                self._timeout(rec, left, ended[1] if ended is not None else None)
            if rec.state == "SYN_SENT":
                key = flow_key(rec)
                entry = self.states.maps["SYN_SENT"].peek(key)
                if entry is not None:
                    self._dest_group(entry.subject).sockets[key] = entry
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
    def _dest(s: Subject) -> GroupKey:
        return (s.host_id, "dest", s.dst, s.dport)

    def _dest_group(self, s: Subject) -> _Group:
        gk = self._dest(s)
        group = self.dests.get(gk)
        if group is None:
            group = self.dests[gk] = _Group(target_subject(s), OrderedDict())
        elif (group.subject.tgid or group.subject.pid) != (s.tgid or s.pid):
            group.subject.pid = group.subject.tgid = None  # callers from several processes
            group.subject.comm = None
        return group

    def _left(self, state: str, key: object, entry: _Stuck, now: float) -> None:
        gk = self._dest(entry.subject)
        group = self.dests.get(gk)
        if group is None:
            return
        group.sockets.pop(key, None)
        if not group.sockets:
            del self.dests[gk]
            if group.fired:
                self.ctx.book.release(self.rule_id, "syn-sent", entry.subject.host_id, gk[1:], now, 2 * self.window)

    def _timeout(self, rec: TcpStateChange, left: _Stuck, attempt: Attempt | None) -> None:
        waited = rec.ts_wall - left.since
        s = left.subject
        target = ("dest", rec.dst, rec.dport)
        g = self.timeouts.join("connect-timeout", target, s, flow_key(rec), s.conn_uuid, waited, target_subject)
        lst = self.full.serving(rec.host_id, rec.dst, rec.dport, left.since)
        message = (
            f"{callers(g.subject, g.total)} gave up connecting to {endpoint(rec.dst, rec.dport)} without any answer "
            f"(no SYN-ACK, no RST), the latest after {waited:.1f} s: connect timeouts, "
            + (
                FullListeners.cause(lst)
                if lst is not None
                else timeout_cause(attempt, rec.ts_wall) or "the peer or the path is dropping SYNs."
            )
        )
        self.fire(
            "connect-timeout", target, now=rec.ts_wall, severity="notice", subject=g.subject,
            message=message, clear_after=2 * self.window, metric=waited, evidence=[left.seq, rec.seq],
            members=g.total, member_conn_uuids=g.conns,
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
        self.states.due("SYN_SENT", now - limit)  # drained: the destinations below report them
        for gk, group in self.dests.items():
            self._stuck(now, gk, group, limit)

    def _stuck(self, now: float, gk: GroupKey, group: _Group, limit: float) -> None:
        stuck = list(itertools.takewhile(lambda e: e.since <= now - limit, group.sockets.values()))
        if not stuck:
            if group.fired:  # every stuck one connected or gave up; younger ones wait
                group.fired = False
                self.ctx.book.release(self.rule_id, "syn-sent", group.subject.host_id, gk[1:], now, 2 * self.window)
            return
        group.fired = True
        n, oldest, s = len(stuck), stuck[0], group.subject
        many = n > self.num("per_destination")
        message = (
            f"{callers(s, n)} {'have' if n > 1 else 'has'} been waiting in SYN_SENT for {endpoint(s.dst, s.dport)} "
            f"for more than {limit:g} s, the oldest {now - oldest.since:.1f} s: past the first SYN retry, connect "
            f"latency is already over a second and the kernel only gives up after about 127 s"
            + (": the destination is unreachable or overloaded, and every caller waits on it." if many else ".")
        )
        lst = self.full.serving(s.host_id, s.dst, s.dport, oldest.since)
        if lst is not None:
            message += " The cause: " + FullListeners.cause(lst)
        conns = [e.subject.conn_uuid for e in stuck[: 2 * MAX_MEMBER_CONNS]]
        self.fire(
            "syn-sent", gk[1:], now=now, severity="warning" if many else "notice", subject=s, message=message,
            clear_after=INF, metric=float(n), evidence=[e.seq for e in stuck[:32]], members=n,
            member_conn_uuids=[c for c in conns if c is not None], bump=False,
        )  # fmt: skip
