"""The live side of ``nettrail collect``: alerts over the record stream, and the records
the collector adds to what the kernel sends (stack counters, spool loss).

``Alerting.stream`` runs ``engine.run`` over the polled batches: each record is passed
through, alerts are interleaved, idle polls become ``None`` heartbeats so timeouts and
hysteresis fire on a quiet host, and every alert goes to the notifiers of the rules
file's [notify] section. Output is written to the sink once per poll, so alerts reach
every sink (xo, --out, --server) in the same batches as the records behind them.

``Extras.add`` appends to each poll's records: ``stack_counter`` records when selected
MIB counters of a network namespace moved (collector/stack_counters.py reads every
namespace of the host once a second and is passed in: this layer imports no agent), and a
``loss_report`` with event_type ``spool`` when the HTTP sink dropped records for lack
of spool space. Keep in sync with nettrail/commands/collect.py, docs/collector.md and
docs/alerts.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol

from translators.kernel import KernelEnv, KernelRecord, as_struct, collector_envelope
from translators.records import LossReport, Record

from . import engine
from .config import RulesConfig, load_config
from .notify import Notifiers, WebhookNotifier


class Sink(Protocol):
    def write(self, records: list[KernelRecord]) -> None: ...


class Numbering(Protocol):
    def number(self, records: list[KernelRecord]) -> list[KernelRecord]: ...


class SelfReports(Protocol):
    """collector.health.reporter.SelfHealth: the collector's records about itself (H2, H4)."""

    def add(self, records: list[KernelRecord], final: bool = False, stopping: bool = False) -> list[KernelRecord]: ...


class CounterReader(Protocol):
    """collector.stack_counters.StackCounters: the MIB counters of every network namespace."""

    def due(self, final: bool) -> bool: ...

    def records(self, env: KernelEnv) -> list[KernelRecord]: ...


class Extras:
    """Adds the collector's own records to each poll's batch, numbered by the source."""

    def __init__(
        self,
        source: Numbering,
        env: KernelEnv,
        sink: object,
        counters: CounterReader | None,
        health: SelfReports | None = None,
    ) -> None:
        self.source = source
        self.env = env
        self.sink = sink
        self.counters = counters
        self.health = health
        self.lost_seen = {reason: self._lost(attribute) for reason, attribute in SINK_LOSSES.items()}

    def _lost(self, attribute: str) -> int:
        return int(getattr(self.sink, attribute, 0))

    def add(self, records: list[KernelRecord], final: bool = False, stopping: bool = False) -> list[KernelRecord]:
        extra: list[KernelRecord] = []
        if self.counters is not None and self.counters.due(final):
            extra.extend(self.counters.records(self.env))
        for reason, attribute in SINK_LOSSES.items():
            lost = self._lost(attribute)
            if lost > self.lost_seen[reason]:
                extra.append(self.sink_loss(reason, lost - self.lost_seen[reason], lost))
                self.lost_seen[reason] = lost
        take_killed = getattr(self.sink, "take_killed", None)  # the HTTP sink's, once per sink
        killed = take_killed() if take_killed is not None else 0
        if killed:
            extra.append(self.sink_loss("killed", killed, killed))
        if self.health is not None:
            extra.extend(self.health.add(records, final, stopping))
        if not extra:
            return records
        return records + self.source.number(extra)

    def sink_loss(self, reason: str, lost: int, total: int) -> LossReport:
        return LossReport(
            **collector_envelope(self.env, "loss", f"sink/{reason}"), event_type=reason, lost=lost, lost_total=total,
        )  # fmt: skip


# Records the sink could not bring to the database, by loss_report event_type: dropped
# for lack of spool space, and refused by the server (collector/sinks/http.py). A third,
# "killed", is what a collector killed on the same spool held in memory, reported once
# by the next one (HttpSink.take_killed).
SINK_LOSSES = {"spool": "lost_records", "rejected": "refused_records"}


class Alerting:
    """The rule engine and its notifiers for one collector run."""

    def __init__(self, config: RulesConfig, folding: bool = False) -> None:
        self.config = config
        self.engine = engine.RuleEngine(config, folding=folding)  # folding: tcp --tcp-fold (folded.py)
        self.notifiers = Notifiers(config.notify)
        self.alerts = 0

    @classmethod
    def from_args(cls, rules: str | None, folding: bool = False) -> Alerting:
        """From --rules FILE (else $NETTRAIL_RULES, else the defaults); ConfigError says what is wrong."""
        return cls(load_config(rules), folding)

    def stream(self, batches: Iterable[list[KernelRecord]], sink: Sink) -> None:
        """Records and their alerts to ``sink``, one write per poll."""
        out: list[Record] = []

        def flush() -> None:
            if out:
                sink.write(out)  # type: ignore[arg-type]  # Structs encode like their wire dicts
                out.clear()

        def records() -> Iterator[Record | None]:
            # engine.run yields a record and everything it caused before pulling the
            # next one: when this generator resumes, the previous batch is complete.
            for batch in batches:
                if not batch:
                    yield None  # idle: the engine sweeps at wall-clock time
                for rec in batch:
                    yield as_struct(rec)
                flush()

        for rec in engine.run(records(), engine=self.engine, on_alert=self._notify):
            out.append(rec)
        flush()

    def _notify(self, alert: object) -> None:
        self.alerts += 1
        self.notifiers.submit(alert)  # type: ignore[arg-type]

    def close(self, drain_s: float = 5.0) -> None:
        """Give queued notifications up to ``drain_s`` seconds, then stop the channels."""
        for channel in self.notifiers.channels:
            if isinstance(channel, WebhookNotifier):
                channel.wait_idle(drain_s)
        self.notifiers.close()
