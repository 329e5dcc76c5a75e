"""The alert book: grouping, hysteresis and the Alert records the engine emits.

A rule *fires* for a key (rule, condition, host, subject). The first firing opens an
alert and emits it; later firings of the same key update that one alert (count, end,
evidence, metric) instead of emitting new ones, and a rise in severity re-emits it.
An alert closes, and is emitted once more with status "closed", when its condition has
not held for ``clear_after`` seconds (two windows of its rule, anomalies.md section 1).
A re-fire within ``refire_suppress_s`` of closing reopens the same alert (same
alert_id) without a new emission unless severity rises; its next close emits it again.
Consumers therefore upsert alerts by ``alert_id``.

Current numbers (issue 34 item 3): every firing, counted or not, replaces the alert's
message and metric, and an open alert whose message, metric or count moved since its
last version is emitted again (an ``update``, same alert_id) at most once per
``update_interval_s``, from the firing itself or from the next sweep; closing and
finishing emit the present state too. So the newest version never lags the present
state by more than ``update_interval_s`` plus one sweep, and a flood of firings costs
at most one version per alert per interval.

Storm guard: one (host, rule, condition) may open at most ``max_new_per_min`` alerts a
minute. Beyond that, new subjects are folded into one host-level alert of the same rule
and condition (subject "folded"), whose count says how many were folded; a scan of a
million addresses thus yields a bounded number of alerts.

Keep in sync with translators.records.Alert and docs/alerts.md.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from translators.records import SEVERITIES, Alert

from .state import LruMap, Window

SEVERITY_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}
# Alert seq numbers live far above any collector sequence number of the same
# (host, boot), so ingest's idempotency key (host, boot_id, seq) never collides.
ALERT_SEQ_BASE = 1 << 62
# A grouped finding lists its first member sockets' ids; `members` counts them all.
MAX_MEMBER_CONNS = 50


@dataclass(slots=True)
class Subject:
    """Who an alert is about: the host, and the flow and owner when there is one."""

    host_id: str
    boot_id: str
    conn_uuid: str | None = None
    sock_cookie: int | None = None
    pid: int | None = None
    tgid: int | None = None
    comm: str | None = None
    netns: int | None = None
    proto: str | None = None
    ip_ver: int | None = None
    src: str | None = None
    sport: int | None = None
    dst: str | None = None
    dport: int | None = None


@dataclass(slots=True)
class _Entry:
    alert_id: str
    rule_id: str
    condition: str
    severity: str
    subject: Subject
    start: float
    last: float
    clear_after: float
    message: str
    metric: float | None
    thresholds: dict[str, float | int | str]
    evidence: list[int] = field(default_factory=list)
    count: int = 0
    sampling: float | None = None  # packets per sample behind it (H2); None: unsampled data
    emitted_count: int = 0
    emitted_last: float = 0.0
    emitted_at: float = float("-inf")  # engine time of the last emitted version
    emitted_message: str = ""
    emitted_metric: float | None = None
    members: int | None = None  # sockets a grouped finding holds (issue 34 item 1)
    member_conn_uuids: list[str] = field(default_factory=list)
    emitted_members: int | None = None
    closed_at: float | None = None


Key = tuple[str, str, str, object]


class AlertBook:
    def __init__(
        self,
        *,
        max_open: int,
        max_evidence: int,
        refire_suppress_s: float,
        max_new_per_min: int = 100,
        max_keys: int = 16384,
        seq_base: int | None = None,
        update_interval_s: float = 10.0,
    ) -> None:
        self.max_evidence = max_evidence
        self.update_interval_s = update_interval_s
        self.max_new_per_min = max_new_per_min
        self._new: LruMap[tuple[str, str, str], Window] = LruMap(max_keys)
        self.refire_suppress_s = refire_suppress_s
        self._out: list[Alert] = []
        self._open: LruMap[Key, _Entry] = LruMap(max_open, on_evict=self._evicted)
        self._closed: LruMap[Key, _Entry] = LruMap(max_open)
        if seq_base is None:
            # Distinct per engine start so a restarted collector never reuses a seq.
            seq_base = ALERT_SEQ_BASE + (int(time.time() * 1000) << 20)
        self._seq = itertools.count(seq_base)
        self._clock: dict[str, tuple[int, float]] = {}  # host -> (ts_ns, ts_wall) last seen
        self._losses: dict[str, deque[tuple[float, float]]] = {}  # host -> (time, window)
        self._now = 0.0

    # --- inputs from the engine -------------------------------------------------------

    def observe_clock(self, host_id: str, ts_ns: int, ts_wall: float) -> None:
        clock = self._clock
        if host_id not in clock and len(clock) > 4096:
            clock.clear()  # a stream of thousands of hosts: keep the mapping cheap
        clock[host_id] = (ts_ns, ts_wall)
        if ts_wall > self._now:
            self._now = ts_wall

    def mark_loss(self, host_id: str, t: float, window: float) -> None:
        """The collector lost events of this host in (t - window, t]: alerts spanning it are incomplete (H1)."""
        self._losses.setdefault(host_id, deque(maxlen=16)).append((t, window))

    def _incomplete(self, entry: _Entry) -> bool:
        losses = self._losses.get(entry.subject.host_id, ())
        return any(entry.start - window <= t <= entry.last + window for t, window in losses)

    def open_count(self) -> int:
        return len(self._open)

    def is_open(self, rule_id: str, condition: str, host_id: str, key: object) -> bool:
        return (rule_id, condition, host_id, key) in self._open

    # --- firing -----------------------------------------------------------------------

    def fire(
        self,
        rule_id: str,
        condition: str,
        key: object,
        *,
        now: float,
        severity: str,
        subject: Subject,
        message: str,
        thresholds: dict[str, float | int | str],
        clear_after: float,
        metric: float | None = None,
        evidence: Iterable[int] = (),
        bump: bool = True,
        sampling: float | None = None,
        members: int | None = None,
        member_conn_uuids: list[str] | None = None,
        count: int | None = None,
    ) -> None:
        """The condition holds now. ``bump`` False refreshes an open alert without counting.
        ``sampling``: the firing was judged on sampled data, one sample per that many packets.
        ``members``/``member_conn_uuids``: a grouped finding's sockets now (the whole count, the first
        ids); ``count``: the count to state instead of counting firings (a group's sockets struck)."""
        k: Key = (rule_id, condition, subject.host_id, key)
        entry = self._open.get(k)
        if entry is None:
            entry = self._reopen(k, now)
            if entry is None:
                if self._storm(rule_id, condition, subject.host_id, now):
                    self._fold(rule_id, condition, key, now, severity, subject, thresholds, clear_after, evidence)
                    return
                entry = _Entry(
                    alert_id=str(uuid.uuid4()), rule_id=rule_id, condition=condition, severity=severity,
                    subject=subject, start=now, last=now, clear_after=clear_after, message=message,
                    metric=metric, thresholds=thresholds,
                )  # fmt: skip
                self._add_evidence(entry, evidence)
                entry.count = 1 if count is None else count
                entry.sampling = sampling
                self._set_members(entry, members, member_conn_uuids)
                self._open.put(k, entry)
                self._emit(entry, "open", now)
                return
        rose = SEVERITY_RANK[severity] > SEVERITY_RANK[entry.severity]
        if count is not None:
            entry.count = count
        else:
            entry.count += 1 if bump else 0
        self._set_members(entry, members, member_conn_uuids)
        entry.last = max(entry.last, now)
        # an uncounted refresh (an aggregate re-measured) states the present too: a
        # message kept from the first firing said "81 sockets" while 200 leaked (issue 34)
        entry.message = message
        entry.metric = metric
        entry.clear_after = clear_after
        entry.sampling = sampling  # the latest firing's, like the message whose sentence states it
        self._merge_subject(entry.subject, subject)
        self._add_evidence(entry, evidence)
        if rose:
            entry.severity = severity
            self._emit(entry, "open", now)
        else:
            self._update(entry, now)

    @staticmethod
    def _set_members(entry: _Entry, members: int | None, member_conn_uuids: list[str] | None) -> None:
        if members is not None:
            entry.members = members
            entry.member_conn_uuids = list(member_conn_uuids or ())[:MAX_MEMBER_CONNS]

    def _changed(self, entry: _Entry) -> bool:
        return (
            entry.members != entry.emitted_members
            or entry.count != entry.emitted_count
            or entry.message != entry.emitted_message
            or entry.metric != entry.emitted_metric
        )

    def _update(self, entry: _Entry, now: float) -> None:
        """Emit the present state if it moved and the last version is at least an interval old."""
        if now - entry.emitted_at >= self.update_interval_s and self._changed(entry):
            self._emit(entry, "open", now)

    def release(self, rule_id: str, condition: str, host_id: str, key: object, now: float, clear_after: float) -> None:
        """A held condition (fired with an infinite clear_after) ended now: clear normally from here."""
        entry = self._open.peek((rule_id, condition, host_id, key))
        if entry is not None:
            entry.last = max(entry.last, now)
            entry.clear_after = clear_after

    def _storm(self, rule_id: str, condition: str, host_id: str, now: float) -> bool:
        w = self._new.get_or_create((host_id, rule_id, condition), lambda: Window(60))
        if w.total(now) >= self.max_new_per_min:
            return True
        w.add(now)
        return False

    def _fold(
        self, rule_id: str, condition: str, key: object, now: float, severity: str, subject: Subject,
        thresholds: dict[str, float | int | str], clear_after: float, evidence: Iterable[int],
    ) -> None:  # fmt: skip
        k: Key = (rule_id, condition, subject.host_id, ("folded",))
        entry = self._open.get(k) or self._reopen(k, now)
        if entry is None:
            entry = _Entry(
                alert_id=str(uuid.uuid4()), rule_id=rule_id, condition=condition, severity=severity,
                subject=Subject(host_id=subject.host_id, boot_id=subject.boot_id, netns=subject.netns),
                start=now, last=now, clear_after=min(clear_after, 600.0), message="", metric=None,
                thresholds=thresholds,
            )  # fmt: skip
            self._open.put(k, entry)
        entry.count += 1
        entry.last = max(entry.last, now)
        entry.metric = float(entry.count)
        entry.message = (
            f"{entry.count} further {rule_id} {condition} alerts on this host were folded into this one: more than "
            f"{self.max_new_per_min} new ones a minute is itself the finding (a scan, a flood or a host-wide fault)."
        )
        self._add_evidence(entry, evidence)
        if entry.count == 1 or SEVERITY_RANK[severity] > SEVERITY_RANK[entry.severity]:
            entry.severity = max(severity, entry.severity, key=SEVERITY_RANK.__getitem__)
            self._emit(entry, "open", now)
        else:
            self._update(entry, now)

    def _reopen(self, k: Key, now: float) -> _Entry | None:
        old = self._closed.peek(k)
        if old is None or old.closed_at is None or now - old.closed_at > self.refire_suppress_s:
            return None
        self._closed.pop(k)
        old.closed_at = None
        self._open.put(k, old)
        return old

    def _add_evidence(self, entry: _Entry, evidence: Iterable[int]) -> None:
        room = self.max_evidence - len(entry.evidence)
        if room <= 0:
            return
        for seq in evidence:
            if seq not in entry.evidence:
                entry.evidence.append(seq)
                room -= 1
                if room == 0:
                    break

    @staticmethod
    def _merge_subject(into: Subject, new: Subject) -> None:
        # Owner attribution often arrives after the first event (connect/accept map).
        if into.pid is None and new.pid is not None:
            into.pid, into.tgid, into.comm = new.pid, new.tgid, new.comm

    # --- sweeping and draining -------------------------------------------------------------

    def sweep(self, now: float) -> None:
        """Close every alert whose condition has been clear for its ``clear_after``."""
        expired = [(k, e) for k, e in self._open.items() if now - e.last >= e.clear_after]
        for k, entry in expired:
            self._close(k, entry, now)
        for entry in self._open.values():
            self._update(entry, now)  # a burst's last firings came within the interval: say them now

    def finish(self) -> None:
        """End of stream: re-emit open alerts whose count or end moved since last emitted."""
        for _k, entry in self._open.items():
            if self._changed(entry) or entry.last != entry.emitted_last:
                self._emit(entry, "open", entry.last)

    def drain(self) -> list[Alert]:
        out, self._out = self._out, []
        return out

    def _close(self, k: Key, entry: _Entry, now: float) -> None:
        self._open.pop(k)
        entry.closed_at = now
        self._closed.put(k, entry)
        self._emit(entry, "closed", min(now, entry.last + entry.clear_after))

    def _evicted(self, k: Key, entry: _Entry) -> None:
        entry.closed_at = entry.last
        self._emit(entry, "closed", entry.last)

    def _emit(self, entry: _Entry, status: str, now: float) -> None:
        s = entry.subject
        ts_ns = 0
        clock = self._clock.get(s.host_id)
        if clock is not None:
            ts_ns = max(0, clock[0] + int((now - clock[1]) * 1e9))
        incomplete = self._incomplete(entry)
        self._out.append(
            Alert(
                host_id=s.host_id,
                boot_id=s.boot_id,
                seq=next(self._seq),
                ts_ns=ts_ns,
                ts_wall=now,
                provider="nettrail",
                probe="alert",
                conn_uuid=s.conn_uuid,
                sock_cookie=s.sock_cookie,
                pid=s.pid,
                tgid=s.tgid,
                comm=s.comm,
                netns=s.netns,
                ip_ver=s.ip_ver,
                src=s.src,
                sport=s.sport,
                dst=s.dst,
                dport=s.dport,
                proto=s.proto,
                rule_id=entry.rule_id,
                condition=entry.condition,
                alert_id=entry.alert_id,
                severity=entry.severity,
                status=status,
                start=entry.start,
                end=entry.last,
                count=entry.count,
                message=entry.message,
                metric=entry.metric,
                thresholds=dict(entry.thresholds),
                evidence=list(entry.evidence),
                incomplete=incomplete or None,
                sampling_ratio=entry.sampling,
                members=entry.members,
                member_conn_uuids=list(entry.member_conn_uuids),
            )  # fmt: skip
        )
        entry.emitted_count = entry.count
        entry.emitted_last = entry.last
        entry.emitted_at = max(now, entry.emitted_at)
        entry.emitted_message = entry.message
        entry.emitted_metric = entry.metric
        entry.emitted_members = entry.members
