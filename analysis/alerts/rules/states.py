"""K8 half-open and stuck handshakes, K10 sockets stuck in CLOSE_WAIT / FIN_WAIT_2 and
TIME_WAIT pile-ups (anomalies.md 4), from ``tcp_state`` transitions and sweeps.

Sockets currently in SYN_SENT, CLOSE_WAIT or FIN_WAIT_2 sit in insertion-ordered maps
(oldest first, records arrive in time order), so a sweep only walks the sockets that
are old enough plus one. Each map is an LRU with the per-flow cap.

K10 CLOSE_WAIT is one finding per fix target (issue 34 item 1): the owning process
(tgid, comm), or for unattributed sockets the local address and port (the listener). Its
members are that target's sockets in CLOSE_WAIT now; it opens when one of them has been
there ``close_wait_s`` or when there are more than ``close_wait_per_process``
(warning), is re-measured at every sweep, and clears once none is left.

K10 "the CLOSE_WAIT count grows": each sweep counts, per process, the sockets that have
been in CLOSE_WAIT for at least one sweep interval (so the instants of ordinary closes
never count); the count *grows* when over the last ``close_wait_growth_s`` it never
fell from one sweep to the next and rose in both halves of that window (a rise that
levelled off, or one that only just began, is not growth for the whole window). The TIME_WAIT limit
is ``time_wait_share`` of the ephemeral port range; ``ephemeral_ports = 0`` reads the
range's size from net.ipv4.ip_local_port_range of the namespace the engine runs in.
"""

from __future__ import annotations

import functools
import itertools
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from translators.records import Connection, Record, SockEvent, TcpReset, TcpRetransmit, TcpStateChange

from ..book import MAX_MEMBER_CONNS, Subject
from ..state import DistinctWindow, LruMap, Window
from .base import Context, Rule, endpoint, flow_key, who
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


class StuckClose(Rule):
    rule_id = "K10"
    kinds = ("tcp_state", "connection")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.sweep = self.num("sweep_s")
        self.states = StateTracker(("CLOSE_WAIT", "FIN_WAIT_2"), ctx.max_flows, ctx, self._left)
        self.time_wait = self.keys_map()
        self.close_wait_groups: dict[GroupKey, _Group] = {}  # bounded: members are the tracker's entries
        self.growth: LruMap[tuple[str, str, int, str | None], deque[tuple[float, int]]] = self.keys_map()
        self.next_sweep = 0.0
        ports = int(self.p["ephemeral_ports"]) or ephemeral_range_size()
        self.ephemeral_ports = ports
        self.thresholds = {**self.thresholds, "ephemeral_ports": ports}  # the value in force, not "0 = auto"

    def feed(self, rec: Record) -> None:
        if isinstance(rec, TcpStateChange):
            self.states.change(rec)
            if rec.state == "CLOSE_WAIT":
                key = flow_key(rec)
                entry = self.states.maps["CLOSE_WAIT"].peek(key)
                if entry is not None:
                    group = self._group(entry.subject)
                    group.sockets[key] = entry
                    group.joined += 1
            elif rec.state == "TIME_WAIT":
                self._time_wait(rec)
        elif isinstance(rec, Connection) and rec.source == "kernel":
            self.states.forget(rec)

    @staticmethod
    def _owner(s: Subject) -> Owner | None:
        pid = s.tgid or s.pid
        return None if pid is None else (s.host_id, s.boot_id, pid, s.comm)

    @staticmethod
    def _group_key(s: Subject) -> GroupKey:
        """The fix target: the owning process, else the local endpoint (a listener's port)."""
        pid = s.tgid or s.pid
        if pid is not None:
            # the tgid alone: a process's threads may carry their own names (comm), and
            # a finding per thread name would split one leak in several
            return (s.host_id, "process", pid)
        return (s.host_id, "local", s.netns, s.src, s.sport)

    def _group(self, s: Subject) -> _Group:
        gk = self._group_key(s)
        group = self.close_wait_groups.get(gk)
        if group is None:
            pid = s.tgid or s.pid
            # the local endpoint too while every member shares it (a server's listener port)
            subject = Subject(
                host_id=s.host_id, boot_id=s.boot_id, pid=pid, tgid=pid, comm=s.comm if pid else None,
                netns=s.netns, proto="tcp", ip_ver=s.ip_ver, src=s.src, sport=s.sport,
            )  # fmt: skip
            group = self.close_wait_groups[gk] = _Group(subject, OrderedDict())
        elif (group.subject.src, group.subject.sport) != (s.src, s.sport):
            group.subject.ip_ver = group.subject.src = group.subject.sport = None  # many local endpoints
        return group

    def _left(self, state: str, key: object, entry: _Stuck, now: float) -> None:
        if state == "CLOSE_WAIT":
            gk = self._group_key(entry.subject)
            group = self.close_wait_groups.get(gk)
            if group is not None:
                group.sockets.pop(key, None)
                if not group.sockets:
                    del self.close_wait_groups[gk]
                    if group.fired:
                        self.ctx.book.release(
                            self.rule_id, "close-wait", group.subject.host_id, gk[1:], now, 2 * self.sweep
                        )
            return
        if entry.fired:
            cond = state.lower().replace("_", "-")
            self.ctx.book.release(self.rule_id, cond, entry.subject.host_id, key, now, 2 * self.sweep)

    def _time_wait(self, rec: TcpStateChange) -> None:
        span = self.num("time_wait_s")
        w = self.time_wait.get_or_create((rec.host_id, rec.dst, rec.dport), lambda: Window(span))
        w.add(rec.ts_wall)
        n = w.total(rec.ts_wall)
        limit = self.num("time_wait_share") * self.ephemeral_ports
        if n <= limit:
            return
        subject = Subject(
            host_id=rec.host_id, boot_id=rec.boot_id, netns=rec.netns, proto="tcp", dst=rec.dst, dport=rec.dport
        )
        message = (
            f"{int(n)} connections to {endpoint(rec.dst, rec.dport)} entered TIME_WAIT in the last {span:g} s, more "
            f"than {self.num('time_wait_share'):.0%} of the {self.ephemeral_ports}-port ephemeral range: new "
            f"connections to it will soon fail to find a free local port."
        )
        self.fire(
            "time-wait", ("dest", rec.dst, rec.dport), now=rec.ts_wall, severity="warning", subject=subject,
            message=message, clear_after=2 * span, metric=n, evidence=[rec.seq],
        )  # fmt: skip

    def tick(self, now: float) -> None:
        if now < self.next_sweep:
            return
        self.next_sweep = now + self.sweep
        limit = self.num("close_wait_s")
        self.states.due("CLOSE_WAIT", now - limit)  # drained: the groups below report them
        for gk, group in self.close_wait_groups.items():
            self._close_wait(now, gk, group, limit)
        self._stuck(now, "FIN_WAIT_2", self.num("fin_wait2_s"))
        self._growth(now)

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

    def _close_wait(self, now: float, gk: GroupKey, group: _Group, limit: float) -> None:
        """One finding per fix target, re-measured at every sweep: its present count, its oldest."""
        n = len(group.sockets)
        oldest = next(iter(group.sockets.values()))
        many = n > self.num("close_wait_per_process")
        if not (group.fired or many or oldest.since <= now - limit):
            return
        group.fired = True
        s = group.subject
        if s.comm:
            owner = f"{who(s)} holds" if s.sport is None else f"{who(s)} on {endpoint(s.src, s.sport)} holds"
        else:
            owner = f"The unattributed sockets of {endpoint(s.src, s.sport)} hold"
        peer = endpoint(oldest.subject.dst, oldest.subject.dport)
        message = (
            f"{owner} {n} socket{'s' if n > 1 else ''} in CLOSE_WAIT, the oldest for {now - oldest.since:.0f} s "
            f"(limit {limit:g} s): their peers (the oldest {peer}) closed and it never called close(): "
            + (
                f"more than {self.num('close_wait_per_process'):g}, a file-descriptor leak in progress that ends at "
                f"its descriptor limit."
                if many
                else "a file-descriptor leak."
            )
        )
        conns = [e.subject.conn_uuid for e in itertools.islice(group.sockets.values(), 2 * MAX_MEMBER_CONNS)]
        self.fire(
            "close-wait", gk[1:], now=now, severity="warning" if many else "notice", subject=s, message=message,
            clear_after=INF, metric=float(n), evidence=[e.seq for e in itertools.islice(group.sockets.values(), 32)],
            members=n, member_conn_uuids=[c for c in conns if c is not None], count=group.joined,
        )  # fmt: skip

    def _growth(self, now: float) -> None:
        span = self.num("close_wait_growth_s")
        if span <= 0:
            return
        settled = now - self.sweep  # in CLOSE_WAIT for a whole sweep interval: not an ordinary close
        held: dict[tuple[str, str, int, str | None], list[int]] = {}
        for entry in self.states.maps["CLOSE_WAIT"].values():
            owner = self._owner(entry.subject)
            if owner is not None and entry.since <= settled:
                held.setdefault(owner, []).append(entry.seq)
        for owner in [o for o, _ in self.growth.items() if o not in held]:
            self.growth.pop(owner)  # none left: a later rise starts a new history
        for owner, seqs in held.items():
            history = self.growth.get_or_create(owner, deque)
            history.append((now, len(seqs)))
            while len(history) >= 2 and history[1][0] <= now - span:
                history.popleft()
            self._check_growth(owner, history, now, span, seqs)

    def _check_growth(
        self,
        owner: tuple[str, str, int, str | None],
        history: deque[tuple[float, int]],
        now: float,
        span: float,
        seqs: list[int],
    ) -> None:
        first_t, first_n = history[0]
        n = history[-1][1]
        if first_t > now - span:
            return  # not watched for a whole window yet
        mid = max(c for t, c in history if t <= now - span / 2)
        if not first_n < mid < n:
            return  # a rise that stopped (a plateau), or one that only just started
        counts = [c for _, c in history]
        if any(later < earlier for earlier, later in zip(counts, counts[1:], strict=False)):
            return
        host, boot, pid, comm = owner
        subject = Subject(host_id=host, boot_id=boot, pid=pid, tgid=pid, comm=comm, proto="tcp")
        message = (
            f"{who(subject)} holds {n} sockets in CLOSE_WAIT, up from {first_n} {now - first_t:.0f} s ago and never "
            f"fewer from one sweep to the next: it keeps leaving connections its peers closed open, a file-descriptor "
            f"leak in progress."
        )
        self.fire(
            "close-wait-growth", ("process", pid, comm), now=now, severity="warning", subject=subject,
            message=message, clear_after=2 * self.sweep, metric=float(n), evidence=seqs, bump=False,
        )  # fmt: skip
