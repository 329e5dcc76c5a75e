"""The kernel-agnostic alert rules over a capture: what ``nettrail analyze`` adds to P1-P6.

A capture yields ``connection`` summaries (Zeek conn_state) and, with ``--packets``,
``tcp_segment`` records; the rules that read those apply to a capture as they do to a
live host: K9 port/address scans (failed attempts from the summaries), SYN floods and
SYN scans (the SYNs of ``tcp_segment``), K14 connect failures per service. Rules whose
records a capture never yields (K3 resets, K4 overflows, ...) stay silent. Packets go
through one engine as they stream; the summaries, known only at the end, through a
second one in time order (an engine's windows expect time to move forward).

Each alert is reported once, in its last version (an alert's versions share its
``alert_id``). Keep in sync with nettrail/commands/analyze.py, docs/analyze.md and
docs/alerts.md ("Which records each rule needs").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from translators.records import Alert, Connection, Record

from .config import RulesConfig, load_config
from .engine import run


class CaptureRules:
    def __init__(self, config: RulesConfig | None = None) -> None:
        self.config = config if config is not None else load_config()
        self.latest: dict[str, Alert] = {}

    def _keep(self, alert: Alert) -> None:
        self.latest[alert.alert_id or str(alert.seq)] = alert

    def packets(self, records: Iterable[Record]) -> Iterator[Record]:
        """The packet records, passed through; the alerts they cause are kept."""
        for rec in run(records, self.config):
            if isinstance(rec, Alert):
                self._keep(rec)
            else:
                yield rec

    def connections(self, connections: Iterable[Connection]) -> None:
        ordered: list[Connection] = sorted(connections, key=lambda c: c.ts_wall)
        for rec in run(ordered, self.config):
            if isinstance(rec, Alert):
                self._keep(rec)

    def alerts(self) -> list[Alert]:
        return list(self.latest.values())
