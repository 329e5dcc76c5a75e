"""What every rule module shares: the Rule base class, its context, flow identity.

A rule declares the record kinds it consumes; the engine calls ``feed`` for each such
record and ``tick`` on every sweep. Rules keep their state in ``LruMap``s sized from
the [engine] caps, and report through ``Rule.fire`` (grouping and hysteresis live in
book.AlertBook). Keep in sync with engine.py (dispatch) and docs/alerts.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from translators.records import CollectorStatus, FlowCounters, FlowRecord, Record, SamplingReport, SiftrSample

from ..book import AlertBook, Subject
from ..config import RulesConfig
from ..state import LruMap

FlowKey = tuple[Any, ...] | str


def flow_key(rec: Record) -> FlowKey:
    """Connection identity: the socket cookie's UUID first, the tuple only as a fallback."""
    if rec.conn_uuid is not None:
        return rec.conn_uuid  # a str: no tuple to build per lookup
    if rec.sock_cookie is not None:
        return ("k", rec.host_id, rec.boot_id, rec.sock_cookie)
    if isinstance(rec, FlowRecord):
        return ("t", rec.host_id, rec.netns, rec.src, rec.sport, rec.dst, rec.dport)
    return ("h", rec.host_id)


def subject_of(rec: Record, proto: str | None = None) -> Subject:
    """The alert subject for a record: envelope owner plus its tuple, if it has one."""
    s = Subject(
        host_id=rec.host_id, boot_id=rec.boot_id, conn_uuid=rec.conn_uuid, sock_cookie=rec.sock_cookie,
        pid=rec.pid or None, tgid=rec.tgid, comm=rec.comm if rec.pid else None, netns=rec.netns, proto=proto,
    )  # fmt: skip
    if isinstance(rec, FlowRecord):
        s.ip_ver, s.src, s.sport, s.dst, s.dport = rec.ip_ver, rec.src, rec.sport, rec.dst, rec.dport
    return s


def host_subject(rec: Record) -> Subject:
    """A host-level subject (no flow): protocol-wide pressure, collector loss."""
    return Subject(host_id=rec.host_id, boot_id=rec.boot_id, netns=rec.netns)


def endpoint(addr: str | None, port: int | None) -> str:
    if addr is None:
        return f"port {port}" if port is not None else "an unknown endpoint"
    if ":" in addr:
        return f"[{addr}]:{port}"
    return f"{addr}:{port}"


def who(subject: Subject) -> str:
    """The owning process by its process id (tgid): a record's pid is the thread that ran,
    and a server's worker threads come and go (issue 34 saw 34 alerts naming exited threads)."""
    if subject.comm:
        return f"{subject.comm} (pid {subject.tgid or subject.pid})"
    return "an unattributed socket"


class Sampling:
    """H2: how sampled the SIFTR samples behind a rule are, so K6/K7 can say so.

    Per flow, the latest window of its ``flow_counters`` (Δskbs / Δsamples, the kernel's
    exact counts: the buffers siftr saw, one in ppl sampled; records from before ``skbs``
    existed counted packets per buffer, so their packets stand in); before a flow's first full window, the host's ratio from its last
    ``sampling_report`` or the ``collector_status`` ppl. A window counts once it holds
    ``MIN_WINDOW_SAMPLES`` samples: at ppl N a window of s samples is off by up to N/s (the
    phase of the flow's packet counter), so a report of one retransmit that happened to be
    sampled (1 packet / 1 sample) would read as unsampled data. Shorter windows extend into
    the next report instead.
    """

    MIN_WINDOW_SAMPLES = 16

    def __init__(self, max_flows: int) -> None:
        # per flow: where the open window began (packets, samples, time) and the last ratio
        self.flows: LruMap[FlowKey, tuple[int, int, float, float | None]] = LruMap(max_flows)
        self.hosts: dict[str, float] = {}
        # per host, when its newest collector session began (its collector_status): the
        # kernel's map counts (skbs, samples, udp's and ip-flows' packets) start again there
        self.sessions: dict[str, float] = {}

    def new_session_since(self, host: str, t: float) -> bool:
        """Whether a collector session of `host` began after `t` (map counts restarted)."""
        return self.sessions.get(host, float("-inf")) > t

    def observe(self, rec: Record) -> None:
        if isinstance(rec, FlowCounters):
            if rec.proto != "tcp" or rec.samples <= 0:
                return
            key, packets = flow_key(rec), rec.skbs or rec.packets_in + rec.packets_out
            start = self.flows.peek(key) or (0, 0, float("-inf"), None)
            moved = (packets - start[0], rec.samples - start[1])
            if moved[0] < 0 or moved[1] < 0 or self.new_session_since(rec.host_id, start[2]):
                moved = (packets, rec.samples)  # counts restarted (a new session): a window from zero
            if moved[1] >= self.MIN_WINDOW_SAMPLES:
                self.flows.put(key, (packets, rec.samples, rec.ts_wall, moved[0] / moved[1]))
        elif isinstance(rec, SamplingReport):
            if rec.event_type == "siftr_sample" and rec.ratio is not None and rec.emitted >= self.MIN_WINDOW_SAMPLES:
                self.hosts[rec.host_id] = rec.ratio
        elif isinstance(rec, CollectorStatus):
            self.sessions[rec.host_id] = max(rec.ts_wall, self.sessions.get(rec.host_id, rec.ts_wall))
            if rec.ppl is not None:
                self.hosts[rec.host_id] = float(rec.ppl)

    def ratio(self, rec: Record) -> float | None:
        """Packets per sample behind this record; None when every packet was recorded."""
        if not isinstance(rec, SiftrSample):
            return None  # tcpdebug snapshots and the other kinds are not sampled
        return self.flow_ratio(rec)

    def flow_ratio(self, rec: Record) -> float | None:
        """Packets per SIFTR sample of the record's flow, whatever its kind: for an exact record
        (a congestion-state change) that extends a judgment made on the flow's samples."""
        known = self.flows.peek(flow_key(rec))
        ratio = known[3] if known is not None and known[3] is not None else self.hosts.get(rec.host_id)
        return round(ratio, 2) if ratio is not None and ratio > 1.0 else None

    @staticmethod
    def note(ratio: float | None) -> str:
        """The sentence an alert built on sampled data carries (empty when not sampled)."""
        if ratio is None:
            return ""
        return (
            f" Computed from sampled data: one SIFTR sample per {ratio:.1f} packets of this connection, so a shorter "
            f"episode can be missed (never invented); lower --ppl to see every packet."
        )


@dataclass
class Context:
    config: RulesConfig
    book: AlertBook
    flows: LruMap[FlowKey, Subject]
    max_flows: int
    max_keys: int
    sampling: Sampling = field(default_factory=lambda: Sampling(16384))
    # (host, destination address) -> the key of its K2 pmtu-black-hole finding (pmtu_blackhole.py),
    # so K2's rto finding toward it can name the black hole as the likely cause
    pmtu: LruMap[tuple[str, str | None], tuple[object, ...]] = field(default_factory=lambda: LruMap(16384))

    def pmtu_cause(self, host: str, dst: str | None) -> str:
        """ " The likely cause: ..." when a path-MTU black hole finding toward dst is open, else ""."""
        key = self.pmtu.peek((host, dst))
        if key is None or not self.book.is_open("K2", "pmtu-black-hole", host, key):
            return ""
        return f" The likely cause: a path-MTU black hole on the way to {dst} (its K2 pmtu-black-hole finding)."

    def owner(self, rec: Record, proto: str | None = "tcp") -> Subject:
        """Subject of a record, with the owner learnt from earlier records of the flow."""
        known = self.flows.peek(flow_key(rec))
        s = subject_of(rec, proto)
        if known is not None and s.pid is None and known.pid is not None:
            s.pid, s.tgid, s.comm = known.pid, known.tgid, known.comm
        return s


class Rule:
    rule_id: ClassVar[str]
    kinds: ClassVar[tuple[str, ...]]

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.p = ctx.config.params(self.rule_id)
        self.thresholds = ctx.config.thresholds(self.rule_id)

    def num(self, name: str) -> float:
        return float(self.p[name])

    def flows_map(self) -> LruMap[Any, Any]:
        return LruMap(self.ctx.max_flows)

    def keys_map(self) -> LruMap[Any, Any]:
        return LruMap(self.ctx.max_keys)

    def feed(self, rec: Record) -> None:
        raise NotImplementedError

    def tick(self, now: float) -> None:
        """Periodic sweep; rules without timeouts need nothing here."""

    def fire(
        self,
        condition: str,
        key: object,
        *,
        now: float,
        severity: str,
        subject: Subject,
        message: str,
        clear_after: float,
        metric: float | None = None,
        evidence: Iterable[int] = (),
        bump: bool = True,
        sampling: float | None = None,
        members: int | None = None,
        member_conn_uuids: list[str] | None = None,
        count: int | None = None,
    ) -> None:
        self.ctx.book.fire(
            self.rule_id, condition, key, now=now, severity=severity, subject=subject, message=message,
            thresholds=self.thresholds, clear_after=clear_after, metric=metric, evidence=evidence, bump=bump,
            sampling=sampling, members=members, member_conn_uuids=member_conn_uuids, count=count,
        )  # fmt: skip
