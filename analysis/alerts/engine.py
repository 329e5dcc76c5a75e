"""The streaming anomaly rule engine: records in, Alert records out.

``RuleEngine(config).feed(record)`` dispatches a record to the rules that consume its
kind and returns the alerts that opened, escalated or closed because of it;
``.tick(now)`` runs the periodic sweeps (timeouts, hysteresis) and ``.finish()``
flushes the final state of still-open alerts at the end of a stream. ``run()`` wraps
all of it for pipelines: records pass through unchanged, alerts are interleaved.

Time is the records' ``ts_wall`` (seconds since the epoch), so a replayed file gives
the same alerts as the live run did. Keep in sync with rules/ (the registry),
book.py (grouping), docs/alerts.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from translators.records import (
    BY_KIND,
    Alert,
    CollectorStatus,
    FlowCounters,
    LossReport,
    Record,
    SamplingReport,
    TcpLifecycle,
)

from . import folded
from .book import AlertBook, Subject
from .config import RulesConfig, load_config
from .rules import ALL_RULES
from .rules.base import Context, FlowKey, Rule, Sampling, flow_key, subject_of
from .state import LruMap

# Kinds whose records carry the socket owner (pid, comm) worth remembering per flow.
_OWNER_KINDS = ("tcp_state", "connection", "siftr_sample", "tcpdebug_snapshot", "sock_event", "udp_datagram")
_OWNER_TYPES = frozenset(BY_KIND[k] for k in _OWNER_KINDS)
# Kinds that say how sampled the SIFTR samples are (H2): rules report it with their alerts.
_SAMPLING_TYPES = frozenset({FlowCounters, SamplingReport, CollectorStatus})


class RuleEngine:
    def __init__(
        self, config: RulesConfig | None = None, *, seq_base: int | None = None, folding: bool = False
    ) -> None:
        self.config = config if config is not None else load_config()
        eng = self.config.engine
        self.book = AlertBook(
            max_open=int(eng["max_open_alerts"]),
            max_evidence=int(eng["max_evidence"]),
            refire_suppress_s=float(eng["refire_suppress_s"]),
            max_new_per_min=int(eng["max_new_alerts_per_min"]),
            max_keys=int(eng["max_keys"]),
            seq_base=seq_base,
            update_interval_s=float(eng["update_interval_s"]),
        )
        self.flows: LruMap[FlowKey, Subject] = LruMap(int(eng["max_flows"]))
        self.ctx = Context(
            self.config,
            self.book,
            self.flows,
            int(eng["max_flows"]),
            int(eng["max_keys"]),
            Sampling(int(eng["max_flows"])),
        )
        self.rules: list[Rule] = [cls(self.ctx) for cls in ALL_RULES if self.config.enabled(cls.rule_id)]
        # dispatch on the record's class: cheaper than reading its kind tag per record
        self._dispatch: dict[type, list[Rule]] = {}
        for rule in self.rules:
            for kind in rule.kinds:
                self._dispatch.setdefault(BY_KIND[kind], []).append(rule)
        self._loss_window = float(self.config.params("H1")["window_s"])
        self.now = 0.0
        self.records = 0
        # tcp --tcp-fold: lifecycles read as their records (None until the stream folds)
        self.unfold: folded.Unfold | None = folded.Unfold() if folding else None

    def feed(self, record: Record) -> list[Alert]:
        cls = type(record)
        if cls is Alert:
            return []  # our own output coming back around (a replayed file): not evidence
        if cls is TcpLifecycle and self.unfold is None:
            self.unfold = folded.Unfold()  # the stream folds (a collector with --tcp-fold says so at once)
        if self.unfold is not None:  # tcp --tcp-fold: a lifecycle as its records, in time order (folded.py)
            return [alert for rec in self.unfold.route(record) for alert in self._feed(rec)]
        return self._feed(record)

    def _feed(self, record: Record) -> list[Alert]:
        cls = type(record)
        self.records += 1
        if record.ts_wall > self.now:
            self.now = record.ts_wall
        self.book.observe_clock(record.host_id, record.ts_ns, record.ts_wall)
        if record.pid and cls in _OWNER_TYPES:
            self._remember_owner(record)
        elif isinstance(record, LossReport) and record.lost > 0:
            # every alert of this host active around the loss is built on incomplete data
            self.book.mark_loss(record.host_id, record.ts_wall, self._loss_window)
        if cls in _SAMPLING_TYPES:
            self.ctx.sampling.observe(record)
        for rule in self._dispatch.get(cls, ()):
            rule.feed(record)
        return self.book.drain()

    def tick(self, now: float) -> list[Alert]:
        if now > self.now:
            self.now = now
        released = [a for rec in self.unfold.due(self.now) for a in self._feed(rec)] if self.unfold else []
        for rule in self.rules:
            rule.tick(self.now)
        self.book.sweep(self.now)
        return released + self.book.drain()

    def finish(self) -> list[Alert]:
        released = [a for rec in self.unfold.rest() for a in self._feed(rec)] if self.unfold else []
        self.book.finish()
        return released + self.book.drain()

    def _remember_owner(self, record: Record) -> None:
        # Only task-context attribution or the collector's owner map is trusted: softirq
        # events carry whatever task was interrupted (anomalies.md 4.0).
        if record.ctx == "softirq" and record.attribution != "owner-map":
            return
        self.flows.get_or_create(flow_key(record), lambda: subject_of(record))


def run(
    records: Iterable[Record | None],
    config: RulesConfig | None = None,
    *,
    engine: RuleEngine | None = None,
    clock: Callable[[], float] = time.time,
    on_alert: Callable[[Alert], None] | None = None,
) -> Iterator[Record]:
    """Pass records through and interleave the alerts they cause.

    The engine sweeps whenever record time advances by ``tick_interval_s``. A live
    source with quiet periods may yield ``None`` as a heartbeat: the engine then sweeps
    at ``clock()`` so timeouts (CLOSE_WAIT age, hysteresis) still fire. At the end of
    the stream, the final state of alerts still open is emitted. ``on_alert`` sees
    every alert as it is emitted (notifications: notify.Notifiers.submit).
    """
    eng = engine if engine is not None else RuleEngine(config)
    interval = float(eng.config.engine["tick_interval_s"])
    next_tick: float | None = None

    def emitted(alerts: list[Alert]) -> list[Alert]:
        if on_alert is not None:
            for alert in alerts:
                on_alert(alert)
        return alerts

    for record in records:
        if record is None:
            yield from emitted(eng.tick(clock()))
            continue
        yield record
        yield from emitted(eng.feed(record))
        t = record.ts_wall
        if next_tick is None:
            next_tick = t + interval
        elif t >= next_tick:
            yield from emitted(eng.tick(t))
            next_tick = t + interval
    yield from emitted(eng.finish())
