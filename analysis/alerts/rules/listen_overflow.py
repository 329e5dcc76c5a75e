"""K4 accept-queue overflow: one finding per listener, with its queue, its backlog and the
ListenOverflows / ListenDrops of its network namespace (issue 34 item 2).

Evidence, by what the host sends:
- ``sock_event`` listen-overflow records (collector/listen_queues.py): a listener whose accept
  queue was full (more waiting than its backlog: the kernel's own test) when its namespace's
  ListenOverflows moved, read through sock_diag, with its owner. They come just before that
  read's ListenOverflows ``stack_counter`` record, so the finding that record opens names the
  listener: key ``("listener", netns, port)``.
- ``stack_counter`` ListenOverflows / ListenDrops per namespace (exact). Moves with no full
  listener at the read (the queue drained meanwhile) are one finding for the namespace.
- ``skb_drop`` TCP_LISTEN_OVERFLOW (kernels whose drop points pass the reason; Linux 6.18
  counts overflows without one) and ``drop_count`` deltas: counted per listener (port of the
  namespace) or per host. A host whose collector reads the stack counters (its
  ``collector_status``) is judged from the counters only, so one problem is one finding.

``FullListeners`` keeps the full listeners last seen per host, for K8: a connect that timed
out toward a full listener of this host was dropped by that listener, not by the peer or
the path. Keep in sync with docs/alerts.md (K4), collector/listen_queues.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from translators.records import CollectorStatus, DropCount, FlowRecord, Record, SkbDrop, SockEvent, StackCounter

from ..book import Subject
from ..state import LruMap, Window, bounded_append
from .base import Context, Rule, endpoint, host_subject, who

PROBE = "listen-overflow"
UNSPECIFIED = frozenset({"0.0.0.0", "::"})


def is_full_listener(rec: Record) -> TypeGuard[SockEvent]:
    return isinstance(rec, SockEvent) and rec.probe == PROBE and rec.sport is not None


def netns_label(rec: Record, name: str | None) -> str:
    """The namespace as a person finds it: its inode, and its name or a process in it."""
    if name:
        return f"network namespace {rec.netns} ({name})"
    if rec.comm and isinstance(rec, StackCounter):
        return f"network namespace {rec.netns} (where {rec.comm}, pid {rec.tgid or rec.pid}, runs)"
    return f"network namespace {rec.netns}"


class FullListeners:
    """Per host and port, the listeners last seen with a full accept queue (one per network
    namespace: containers often listen on the same port), and the local addresses of each
    namespace as its sockets show them (a listener on every address serves only its own)."""

    MAX_PER_PORT = 16

    def __init__(self, cap: int, keep_s: float) -> None:
        self.seen: LruMap[tuple[str, int], dict[int | None, SockEvent]] = LruMap(cap)
        self.addrs: LruMap[tuple[str, str], tuple[int | None]] = LruMap(cap)
        self.keep_s = keep_s

    def observe(self, rec: SockEvent) -> None:
        per_ns = self.seen.get_or_create((rec.host_id, rec.sport or 0), dict)
        if rec.netns in per_ns or len(per_ns) < self.MAX_PER_PORT:
            per_ns[rec.netns] = rec

    def note_local(self, rec: FlowRecord) -> None:
        """An established socket's local address is an address of its namespace."""
        if rec.src and rec.src not in UNSPECIFIED:
            self.addrs.put((rec.host_id, rec.src), (rec.netns,))

    def serving(self, host: str, dst: str | None, dport: int | None, since: float) -> SockEvent | None:
        """The full listener of this host that a connect to dst:dport made at `since` met, if
        one was seen full since then: bound to that address, or to every address of the
        namespace that address is known in."""
        if dport is None or dst is None:
            return None
        for lst in (self.seen.peek((host, dport)) or {}).values():
            if lst.ts_wall < since - self.keep_s:
                continue
            if lst.src == dst:
                return lst
            if lst.src in UNSPECIFIED and self.addrs.peek((host, dst)) == (lst.netns,):
                return lst
        return None

    @staticmethod
    def cause(lst: SockEvent) -> str:
        """K8's sentence for connects that a full listener of this host dropped."""
        owner = f" of {lst.comm} (pid {lst.tgid or lst.pid})" if lst.comm else ""
        return (
            f"the listener {endpoint(lst.src, lst.sport)}{owner} in network namespace {lst.netns} on this host has a "
            f"full accept queue ({lst.queue} waiting, backlog {lst.backlog}) and drops their SYNs "
            f"(its K4 finding has the counts)."
        )


@dataclass(slots=True)
class _Ns:
    overflows: Window
    drops: Window
    overflows_value: int = 0
    drops_value: int = 0


@dataclass(slots=True)
class _Drops:
    drops: Window
    evidence: list[int] | None = None


class ListenOverflow(Rule):
    rule_id = "K4"
    kinds = ("skb_drop", "drop_count", "stack_counter", "sock_event", "collector_status")
    REASON = "TCP_LISTEN_OVERFLOW"
    COUNTER = ("TcpExt", "ListenOverflows")
    # Every listen drop, overflows included (tcp_listendrop); a namespace's records of one
    # read carry it before ListenOverflows (collector/stack_counters.py), so the message has both.
    DROPS = ("TcpExt", "ListenDrops")

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        self.window = self.num("window_s")
        self.listeners = self.keys_map()  # (host, *key) -> _Drops: drops from skb drop records
        self.ns = self.keys_map()  # (host, netns) -> _Ns: the namespace's counters
        self.full = self.keys_map()  # (host, netns) -> (ts_ns, [listen-overflow records of that read])
        self.evidence = self.keys_map()  # (host, key) -> evidence seqs of a counter-based finding
        # Hosts whose overflows are judged from the counters (their collector reads them), and
        # hosts that showed the drop reason (their counter would count the same drops twice).
        self.counter_hosts: set[str] = set()
        self.reason_hosts: set[str] = set()

    def feed(self, rec: Record) -> None:
        if isinstance(rec, StackCounter):
            key = (rec.mib, rec.counter)
            if key == self.DROPS and rec.delta > 0:
                ns = self._ns(rec)
                ns.drops.add(rec.ts_wall, rec.delta)
                ns.drops_value = rec.value
            elif key == self.COUNTER and rec.delta > 0:
                self.counter_hosts.add(rec.host_id)
                ns = self._ns(rec)
                ns.overflows.add(rec.ts_wall, rec.delta)
                ns.overflows_value = rec.value
                self._counted(rec, ns)
        elif isinstance(rec, SockEvent):
            if is_full_listener(rec):
                got: tuple[int, list[SockEvent]] | None = self.full.peek((rec.host_id, rec.netns))
                if got is None or got[0] != rec.ts_ns:
                    got = (rec.ts_ns, [])
                    self.full.put((rec.host_id, rec.netns), got)
                got[1].append(rec)
        elif isinstance(rec, CollectorStatus):
            if rec.stack_counters:
                self.counter_hosts.add(rec.host_id)
        elif isinstance(rec, SkbDrop) and rec.drop_reason_str == self.REASON:
            self.reason_hosts.add(rec.host_id)
            if rec.host_id not in self.counter_hosts:
                self._dropped(rec, ("listener", rec.netns, rec.dport), 1)
        elif isinstance(rec, DropCount) and rec.drop_reason_str == self.REASON and rec.delta > 0:
            self.reason_hosts.add(rec.host_id)
            if rec.host_id not in self.counter_hosts:
                self._dropped(rec, ("host",), rec.delta)

    def _ns(self, rec: StackCounter) -> _Ns:
        w = self.window
        return self.ns.get_or_create((rec.host_id, rec.netns), lambda: _Ns(Window(w), Window(w)))  # type: ignore[no-any-return]

    # --- from the namespace's counters ------------------------------------------------------

    def _counted(self, rec: StackCounter, ns: _Ns) -> None:
        t, w = rec.ts_wall, self.window
        got = self.full.peek((rec.host_id, rec.netns))
        full = got[1] if got is not None and got[0] == rec.ts_ns else []
        now_full = bool(full)
        if not full and got is not None and got[1] and t - got[1][0].ts_wall <= 2 * w:
            full = got[1]  # its queue drained since: the moves are still that listener's finding's
        total, drops = int(ns.overflows.total(t)), int(ns.drops.total(t))
        busy = ns.overflows.seconds_with_events(t)
        severity = "critical" if busy >= self.num("critical_seconds") else "warning"
        where = netns_label(rec, rec.netns_name)
        counts = (
            f"{where} counted {total} ListenOverflows and {drops} ListenDrops in the last {w:g} s (overflow in {busy} "
            f"of them; {ns.overflows_value} and {ns.drops_value} since it was created, as nstat -a reads them)"
        )
        for lst in full:
            key = ("listener", lst.netns, lst.sport)
            subject = Subject(
                host_id=lst.host_id, boot_id=lst.boot_id, conn_uuid=lst.conn_uuid, sock_cookie=lst.sock_cookie,
                pid=lst.tgid, tgid=lst.tgid, comm=lst.comm, netns=lst.netns, proto="tcp", ip_ver=lst.ip_ver,
                src=lst.src, sport=lst.sport,
            )  # fmt: skip
            owner = f" of {who(subject)}" if subject.comm else ""
            state = "has a full accept queue" if now_full else f"had a full accept queue {t - lst.ts_wall:.0f} s ago"
            message = (
                f"The listener {endpoint(lst.src, lst.sport)}{owner} {state}: {lst.queue} connections "
                f"wait for accept() and its backlog is {lst.backlog} (ss -ltn: Recv-Q {lst.queue}, Send-Q "
                f"{lst.backlog}), so it drops every new SYN and handshake-completing ACK. {counts}. Each drop costs "
                f"a client at least a 1 s retry: the application accepts too slowly or its listen() backlog (capped by "
                f"net.core.somaxconn) is too small."
            )
            self._fire_counted(rec, key, subject, message, severity, total, [lst.seq, rec.seq])
        if not full and rec.host_id not in self.reason_hosts:
            subject = host_subject(rec)
            subject.proto = "tcp"
            message = (
                f"Listening sockets in {where} dropped {total} connection attempts in {w:g} s because an accept "
                f"queue was full (no listener's queue was full when it was read: it drained meanwhile). {counts}. "
                f"Each drop costs a client at least a 1 s retry: an application accepts too slowly or its listen() "
                f"backlog (capped by net.core.somaxconn) is too small."
            )
            self._fire_counted(rec, ("netns", rec.netns), subject, message, severity, total, [rec.seq])

    def _fire_counted(
        self, rec: StackCounter, key: tuple[object, ...], subject: Subject, message: str, severity: str,
        total: int, seqs: list[int],
    ) -> None:  # fmt: skip
        evidence: list[int] | None = self.evidence.peek((rec.host_id, key))
        for seq in seqs:
            evidence = bounded_append(evidence, seq, 32)
        self.evidence.put((rec.host_id, key), evidence)
        self.fire(
            "overflow", key, now=rec.ts_wall, severity=severity, subject=subject, message=message,
            clear_after=2 * self.window, metric=float(total), evidence=evidence or (),
        )  # fmt: skip

    # --- from drop records (no counters on this host) --------------------------------------

    def _dropped(self, rec: Record, key: tuple[object, ...], n: int) -> None:
        w = self.window
        d = self.listeners.get_or_create((rec.host_id, *key), lambda: _Drops(Window(w)))
        t = rec.ts_wall
        d.drops.add(t, n)
        d.evidence = bounded_append(d.evidence, rec.seq, 32)
        total = int(d.drops.total(t))
        busy = d.drops.seconds_with_events(t)
        critical = busy >= self.num("critical_seconds")
        if isinstance(rec, SkbDrop):
            subject = self.ctx.owner(rec)
            subject.conn_uuid = subject.sock_cookie = None
            subject.src = subject.sport = None
            subject.proto = "tcp"
            where = f"The listener {endpoint(rec.dst, rec.dport)}" + (f" of {who(subject)}" if subject.comm else "")
        else:
            subject = host_subject(rec)
            where = "Listening sockets on this host"
        message = (
            f"{where} dropped {total} connection attempts in {w:g} s (overflow in {busy} of the last {w:g} s) "
            f"because the accept queue was full: each drop costs the client at least a 1 s retry. The application "
            f"accepts too slowly or its listen() backlog (capped by net.core.somaxconn) is too small."
        )
        self.fire(
            "overflow", key, now=t, severity="critical" if critical else "warning", subject=subject,
            message=message, clear_after=2 * w, metric=float(total), evidence=d.evidence or (),
        )  # fmt: skip
