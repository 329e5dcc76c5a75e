"""A capture's records with every alert ``nettrail analyze`` reports: P1-P6 and the K rules.

``capture_records`` (file_records.py) yields the packets, the connection summaries and the
pcap alerts P1-P6; ``nettrail analyze`` also runs the kernel-agnostic rules (K9 scans,
K14 connect failures; analysis/alerts/capture_rules.py) over the packets and then over the
summaries. ``analysed_records`` does the same on the way, so the webapp's upload stores
the alerts the command prints for the same file (issue 18 item 5: the upload had only P4
where ``analyze`` said K14 as well). The packets stream through the rules; the summaries,
known only at the end, are kept until the packets are done (as ``analyze`` keeps them).
Keep in sync with: nettrail/commands/analyze.py (consume, write_results), webapp/api/upload.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import msgspec

from analysis.alerts.capture_rules import CaptureRules
from analysis.alerts.config import RulesConfig
from analysis.capture.file_records import capture_records
from translators.records import Alert, Connection, Record


def analysed_records(
    path: str, name: str, config: RulesConfig | None = None, keep_bytes: bool = True
) -> Iterator[Record]:
    """Packets (with their frame bytes unless keep_bytes is False), connection summaries,
    then the P alerts and the K rules' alerts (each in its last version)."""
    rules = CaptureRules(config)
    summaries: list[Connection] = []
    pcap_alerts: list[Alert] = []

    def packets() -> Iterator[Record]:
        for rec in capture_records(path, name, packets=True, keep_bytes=keep_bytes):
            if isinstance(rec, Connection):
                summaries.append(rec)
            elif isinstance(rec, Alert):
                pcap_alerts.append(rec)
            else:
                yield rec

    last_seq = 0
    for rec in rules.packets(packets()):
        last_seq = max(last_seq, rec.seq)
        yield rec
    rules.connections(summaries)
    yield from summaries
    yield from pcap_alerts
    last_seq = max([last_seq, *(r.seq for r in summaries), *(a.seq for a in pcap_alerts)])
    yield from stable(rules.alerts(), last_seq)


def stable(alerts: list[Alert], last_seq: int) -> Iterator[Alert]:
    """The rules' alerts numbered after the capture's own records and named from what they
    are about: the engine numbers and names them from the clock, so the same file uploaded
    again would store its K alerts twice (every other record of a capture is stored once).
    The name includes the host the capture is stored under (host_id, its name): one file
    uploaded under two names is two hosts, each with its own alerts (issue 33 item 3)."""
    for i, alert in enumerate(alerts, start=1):
        about = (alert.host_id, alert.boot_id, alert.rule_id, alert.condition, alert.src, alert.dst, alert.dport)
        what = "/".join(str(v) for v in about)
        yield msgspec.structs.replace(alert, seq=last_seq + i, alert_id=str(uuid.uuid5(uuid.NAMESPACE_URL, what)))
