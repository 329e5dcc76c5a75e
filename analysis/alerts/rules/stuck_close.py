"""K10: sockets stuck in CLOSE_WAIT / FIN_WAIT_2 and TIME_WAIT pile-ups (anomalies.md 4),
from ``tcp_state`` transitions and sweeps (the tracker: states.py).

K10 CLOSE_WAIT is one finding per fix target (issue 34 item 1): the owning process
(tgid, comm), or for unattributed sockets the local address and port (the listener). Its
members are that target's sockets in CLOSE_WAIT now; it opens when one of them has been
there ``close_wait_s`` or when there are more than ``close_wait_per_process``
(warning), is re-measured at every sweep, and clears once none is left.

K10 FIN_WAIT_2 is one finding per peer (address, port), the end that never sends its FIN:
its members are the sockets in FIN_WAIT_2 toward it past ``fin_wait2_s`` now; with one
member the finding is that socket's. Re-measured at every sweep, released when none is left.

K10 "the CLOSE_WAIT count grows": each sweep counts, per process, the sockets that have
been in CLOSE_WAIT for at least one sweep interval (so the instants of ordinary closes
never count); the count *grows* when over the last ``close_wait_growth_s`` it never
fell from one sweep to the next and rose in both halves of that window (a rise that
levelled off, or one that only just began, is not growth for the whole window). The TIME_WAIT limit
is ``time_wait_share`` of the ephemeral port range; ``ephemeral_ports = 0`` reads the
range's size from net.ipv4.ip_local_port_range of the namespace the engine runs in.
"""

from __future__ import annotations

import copy
import itertools
from collections import OrderedDict, deque

from translators.records import Connection, Record, TcpStateChange

from ..book import MAX_MEMBER_CONNS, Subject
from ..state import LruMap, Window
from .base import Context, Rule, endpoint, flow_key, who
from .groups import callers, keep_subject, target_subject
from .states import INF, GroupKey, Owner, StateTracker, _Group, _Stuck, ephemeral_range_size


class StuckClose(Rule):
    rule_id = "K10"
    kinds = ("tcp_state", "connection")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.sweep = self.num("sweep_s")
        self.states = StateTracker(("CLOSE_WAIT", "FIN_WAIT_2"), ctx.max_flows, ctx, self._left)
        self.time_wait = self.keys_map()
        self.close_wait_groups: dict[GroupKey, _Group] = {}  # bounded: members are the tracker's entries
        self.fin_wait_groups: dict[GroupKey, _Group] = {}  # per peer; bounded likewise
        self.fin_subjects: LruMap[object, Subject] = self.keys_map()  # per finding (groups.keep_subject)
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
            elif rec.state == "FIN_WAIT_2":
                key = flow_key(rec)
                entry = self.states.maps["FIN_WAIT_2"].peek(key)
                if entry is not None:
                    peer = self._peer(entry.subject)
                    fin = self.fin_wait_groups.setdefault(peer, _Group(entry.subject, OrderedDict()))
                    fin.sockets[key] = entry
            elif rec.state == "TIME_WAIT" or rec.timewait_state == "FIN_WAIT_2":
                self._time_wait(rec)  # a FIN_WAIT_2 timewait socket holds its port as long
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

    @staticmethod
    def _peer(s: Subject) -> GroupKey:
        """FIN_WAIT_2's fix target: the peer that never sends its FIN."""
        return (s.host_id, "peer", s.dst, s.dport)

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
        gk = self._peer(entry.subject)
        fin = self.fin_wait_groups.get(gk)
        if fin is not None:
            fin.sockets.pop(key, None)
            if not fin.sockets:
                del self.fin_wait_groups[gk]
                if fin.fired:
                    self.ctx.book.release(self.rule_id, "fin-wait-2", fin.subject.host_id, gk[1:], now, 2 * self.sweep)

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
            f"{int(n)} connections to {endpoint(rec.dst, rec.dport)} entered TIME_WAIT (or a FIN_WAIT_2 timewait "
            f"socket waiting for the peer's FIN) in the last {span:g} s, more "
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
        limit = self.num("fin_wait2_s")
        self.states.due("FIN_WAIT_2", now - limit)  # drained: the peers below report them
        for gk, group in self.fin_wait_groups.items():
            self._fin_wait(now, gk, group, limit)
        self._growth(now)

    def _fin_wait(self, now: float, gk: GroupKey, group: _Group, limit: float) -> None:
        """One finding per peer, re-measured at every sweep: its sockets past the limit now."""
        stuck = list(itertools.takewhile(lambda e: e.since <= now - limit, group.sockets.values()))
        if not stuck:
            if group.fired:  # every stuck one closed; younger ones wait
                group.fired = False
                self.ctx.book.release(self.rule_id, "fin-wait-2", group.subject.host_id, gk[1:], now, 2 * self.sweep)
            return
        group.fired = True
        n, age = len(stuck), now - stuck[0].since
        s = stuck[0].subject if n == 1 else target_subject(stuck[0].subject)
        if len({e.subject.tgid or e.subject.pid for e in stuck}) > 1:
            s.pid = s.tgid = None  # callers from several processes
            s.comm = None
        s = keep_subject(self.fin_subjects, gk, copy.copy(s))  # not the member's own object
        peer = endpoint(s.dst, s.dport)
        if n == 1:
            message = f"A socket has been in FIN_WAIT_2 for {age:.0f} s (limit {limit:g} s): {who(s)} closed its side"
        else:
            message = (
                f"{callers(s, n)} have been in FIN_WAIT_2 toward {peer} for more than {limit:g} s, the oldest "
                f"{age:.0f} s: {who(s) if s.comm else 'their owners'} closed {'its' if s.comm else 'their'} side"
            )
        message += f" and the peer {peer} never sent its FIN: a half-closed connection the peer forgot, or a peer bug."
        conns = [e.subject.conn_uuid for e in stuck[: 2 * MAX_MEMBER_CONNS]]
        self.fire(
            "fin-wait-2", gk[1:], now=now, severity="notice", subject=s, message=message, clear_after=INF,
            metric=age, evidence=[e.seq for e in stuck[:32]], members=n,
            member_conn_uuids=[c for c in conns if c is not None][:MAX_MEMBER_CONNS],
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
