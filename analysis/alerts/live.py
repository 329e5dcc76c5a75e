"""The live side of ``nettrail collect``: alerts over the record stream, and the records
the collector adds to what the kernel sends (stack counters, spool loss).

``Alerting.stream`` runs ``engine.run`` over the polled batches: each record is passed
through, alerts are interleaved, idle polls become ``None`` heartbeats so timeouts and
hysteresis fire on a quiet host, and every alert goes to the notifiers of the rules
file's [notify] section. Output is written to the sink once per poll, so alerts reach
every sink (xo, --out, --server) in the same batches as the records behind them.

``Extras.add`` appends to each poll's records: ``stack_counter`` records when selected
MIB counters of the collector's network namespace moved (read once a second), and a
``loss_report`` with event_type ``spool`` when the HTTP sink dropped records for lack
of spool space. Keep in sync with nettrail/commands/collect.py, docs/collector.md and
docs/alerts.md.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

from translators.kernel import KernelEnv, KernelRecord, as_struct, collector_envelope
from translators.records import LossReport, Record, StackCounter

from . import engine
from .config import RulesConfig, load_config
from .notify import Notifiers, WebhookNotifier

# The counters worth a record when they move (docs/collector.md says why each one).
STACK_COUNTERS: dict[str, tuple[str, ...]] = {
    "TcpExt": (
        "ListenOverflows",
        "ListenDrops",
        "TCPTimeouts",
        "SyncookiesSent",
        "TCPBacklogDrop",
        "TCPZeroWindowDrop",
        "TCPRcvQDrop",
        "TCPAbortOnMemory",
        "TCPReqQFullDrop",
    ),
    "Tcp": ("AttemptFails", "EstabResets", "InErrs", "OutRsts"),
}
STACK_COUNTER_FILES = ("/proc/net/netstat", "/proc/net/snmp")
STACK_COUNTER_INTERVAL_S = 1.0


class Sink(Protocol):
    def write(self, records: list[KernelRecord]) -> None: ...


class Numbering(Protocol):
    def number(self, records: list[KernelRecord]) -> list[KernelRecord]: ...


class SelfReports(Protocol):
    """collector.health.reporter.SelfHealth: the collector's records about itself (H2, H4)."""

    def add(self, records: list[KernelRecord], final: bool = False, stopping: bool = False) -> list[KernelRecord]: ...


def read_mib(paths: Iterable[str] = STACK_COUNTER_FILES) -> dict[tuple[str, str], int]:
    """(group, name) -> value of every counter in the /proc/net MIB files (header/value line pairs)."""
    out: dict[tuple[str, str], int] = {}
    for path in paths:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for names, values in zip(lines[::2], lines[1::2], strict=False):
            group, _, head = names.partition(":")
            _, _, vals = values.partition(":")
            for name, value in zip(head.split(), vals.split(), strict=False):
                out[(group, name)] = int(value)
    return out


def own_netns() -> int:
    return os.stat("/proc/self/ns/net").st_ino


class StackCounters:
    """Reads the MIB counters once a second; the first read is the baseline (no record)."""

    def __init__(self, paths: Iterable[str] = STACK_COUNTER_FILES, interval_s: float = STACK_COUNTER_INTERVAL_S):
        self.paths = tuple(paths)
        self.interval_s = interval_s
        self.netns = own_netns()
        self.seen = self._selected()
        self.next = time.monotonic() + interval_s

    def _selected(self) -> dict[tuple[str, str], int]:
        mib = read_mib(self.paths)
        return {(g, n): mib[(g, n)] for g, names in STACK_COUNTERS.items() for n in names if (g, n) in mib}

    def due(self, final: bool) -> bool:
        return final or time.monotonic() >= self.next

    def records(self, env: KernelEnv) -> list[KernelRecord]:
        self.next = time.monotonic() + self.interval_s
        now = self._selected()
        out: list[KernelRecord] = []
        ts_ns = time.monotonic_ns()  # one read stamps the whole batch
        for (group, name), value in now.items():
            delta = value - self.seen.get((group, name), value)
            if delta <= 0:
                continue
            out.append(
                StackCounter(
                    **collector_envelope(
                        env, "stack-counter", f"/proc/net/{'snmp' if group == 'Tcp' else 'netstat'}", "linux", ts_ns
                    ),
                    netns=self.netns,
                    mib=group,
                    counter=name,
                    value=value,
                    delta=delta,
                )  # fmt: skip
            )
        self.seen = now
        return out


class Extras:
    """Adds the collector's own records to each poll's batch, numbered by the source."""

    def __init__(
        self,
        source: Numbering,
        env: KernelEnv,
        sink: object,
        counters: StackCounters | None,
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

    def __init__(self, config: RulesConfig) -> None:
        self.config = config
        self.engine = engine.RuleEngine(config)
        self.notifiers = Notifiers(config.notify)
        self.alerts = 0

    @classmethod
    def from_args(cls, rules: str | None) -> Alerting:
        """From --rules FILE (else $NETTRAIL_RULES, else the defaults); ConfigError says what is wrong."""
        return cls(load_config(rules))

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
