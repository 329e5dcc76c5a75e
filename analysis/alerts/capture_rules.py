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
from typing import TYPE_CHECKING

from translators.records import Alert, Connection, Record

from .outcomes import capture_outcome

if TYPE_CHECKING:
    from .config import RulesConfig


class CaptureRules:
    def __init__(self, config: RulesConfig | None = None) -> None:
        self._config = config
        self.latest: dict[str, Alert] = {}

    @property
    def config(self) -> RulesConfig:
        """The given configuration, else the defaults and $NETTRAIL_RULES, read when a rule
        first runs: a capture that needs no rule never reads TOML (start-up, issue 17 item 7)."""
        if self._config is None:
            from .config import load_config

            self._config = load_config()
        return self._config

    def _keep(self, alert: Alert) -> None:
        self.latest[alert.alert_id or str(alert.seq)] = alert

    def packets(self, records: Iterable[Record]) -> Iterator[Record]:
        """The packet records, passed through; the alerts they cause are kept."""
        from .engine import run

        for rec in run(records, self.config):
            if isinstance(rec, Alert):
                self._keep(rec)
            else:
                yield rec

    def connections(self, connections: Iterable[Connection]) -> None:
        ordered: list[Connection] = sorted(connections, key=lambda c: c.ts_wall)
        if all(capture_outcome(c) in (None, "success") for c in ordered):
            return  # the rules count failed attempts: none, no alert (and no engine to import)
        from .engine import run

        for rec in run(ordered, self.config):
            if isinstance(rec, Alert):
                self._keep(rec)

    def alerts(self) -> list[Alert]:
        return list(self.latest.values())
