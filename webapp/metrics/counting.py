"""What each stored record adds to the counters (the store hook), and the upsert that adds it.

Runs inside store_batch's transaction with the records actually stored (duplicates
excluded), so a resent batch never counts twice and a rejected batch counts nothing.
Definitions (docs/reports.md, "Metrics"): connections opened = tcp_state into
ESTABLISHED from SYN_SENT/SYN_RECEIVED, plus capture connection summaries; closed =
tcp_state into CLOSED or TIME_WAIT, plus capture summaries that ended (a tcp_lifecycle
counts as the tcp_state records it stands for); drops =
DropCount.delta (exact kernel counts); drop events = skb_drop records.
Keep in sync with: webapp/metrics/exposition.py (names, help), models.py.
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection

from translators import records as r
from translators.records import Record
from webapp.traces import folded, view

# metric key -> (extra label name or "", help text); exposed as nettrail_<key>_total.
METRICS: dict[str, tuple[str, str]] = {
    "records_ingested": ("kind", "Records stored, by record kind"),
    "connections_opened": ("", "TCP connections that reached ESTABLISHED (live) or were seen in a capture"),
    "connections_closed": ("", "TCP connections that closed (live) or ended in a capture"),
    "tcp_retransmits": ("", "TCP retransmission records"),
    "tcp_resets": ("sender", "TCP resets, by who sent them (local or peer)"),
    "drops": ("reason", "Packets the kernel dropped, by drop reason (exact in-kernel counts)"),
    "drop_events": ("reason", "Traced skb drop events, by drop reason (may be sampled)"),
    "collector_lost_events": (
        "event_type",
        "Events the collector lost (ring buffer full, malformed input, program runs the kernel skipped)",
    ),
}
_HOST = operator.attrgetter("host_id")
OPEN_FROM = frozenset({"SYN_SENT", "SYN_RECEIVED"})
CLOSED_STATES = frozenset({"CLOSED", "TIME_WAIT"})

Key = tuple[str, str, str]  # (host, metric, label)
# Record types and the scale-out writer's views of them (webapp/traces/view.py) alike.
KIND_OF: dict[Any, str] = {cls: str(cls.__struct_config__.tag) for cls in r.RECORD_TYPES} | view.KIND_OF_VIEW
# The kinds _extra counts something for (keep in sync with it, and with view.py's fields).
_COUNTED = (
    r.TcpStateChange,
    r.TcpLifecycle,
    r.Connection,
    r.TcpRetransmit,
    r.TcpReset,
    r.DropCount,
    r.SkbDrop,
    r.LossReport,
)
COUNTED_TYPES = frozenset({*_COUNTED, *(view.VIEWS[cls] for cls in _COUNTED)})


def count_stored(records: Sequence[Record]) -> Callable[[], None] | None:
    """The store hook (webapp/traces/store.py): tally now, no database; add() the counts
    when the returned write is run, inside the batch's transaction."""
    deltas = tally(records)
    return functools.partial(add, deltas) if deltas else None


def tally(records: Sequence[Record]) -> Counter[Key]:
    deltas: Counter[Key] = Counter()
    # One count per (host, type) first: `rec.kind` and _extra are per-record Python work
    # that most kinds (SIFTR samples, flow counters ...) do not need.
    # (Both passes iterate in C: map, zip, compress; a generator costs a Python frame a record.)
    types = list(map(type, records))
    for (host, cls), n in Counter(zip(map(_HOST, records), types, strict=True)).items():
        deltas[(host, "records_ingested", KIND_OF[cls])] += n
    for rec in itertools.compress(records, map(COUNTED_TYPES.__contains__, types)):
        host = rec.host_id
        for metric, label, n in _extra(rec):
            if n:
                deltas[(host, metric, label)] += n
    return deltas


def _extra(rec: Any) -> list[tuple[str, str, int]]:
    kind = rec.kind
    if kind == "tcp_state":
        opened = rec.state == "ESTABLISHED" and rec.prev_state in OPEN_FROM
        closed = rec.state in CLOSED_STATES and rec.prev_state not in CLOSED_STATES
        return [("connections_opened", "", int(opened)), ("connections_closed", "", int(closed))]
    if kind == "connection" and rec.proto == "tcp" and rec.source == "wire":
        return [("connections_opened", "", 1), ("connections_closed", "", int(rec.end is not None))]
    if kind == "tcp_lifecycle":  # tcp --tcp-fold: what the changes it stands for count
        return [extra for part in folded.parts(rec) if part.kind == "tcp_state" for extra in _extra(part)]
    if kind == "tcp_retransmit":
        return [("tcp_retransmits", "", 1)]
    if kind == "tcp_reset":
        return [("tcp_resets", rec.sender, 1)]
    if kind == "drop_count":
        return [("drops", rec.drop_reason_str, rec.delta)]
    if kind == "skb_drop":
        return [("drop_events", rec.drop_reason_str, 1)]
    if kind == "loss_report":
        return [("collector_lost_events", rec.event_type, rec.lost)]
    return []


def add(deltas: Counter[Key]) -> None:
    """value += delta per key, creating rows as needed (SQLite >= 3.24 and PostgreSQL)."""
    from webapp.metrics.models import IngestCounter

    quote = connection.ops.quote_name
    table = quote(IngestCounter._meta.db_table)
    sql = (
        f"INSERT INTO {table} (host, metric, label, value) VALUES (%s, %s, %s, %s) "
        f"ON CONFLICT (host, metric, label) DO UPDATE SET value = {table}.value + excluded.value"
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(h, m, lab, n) for (h, m, lab), n in sorted(deltas.items())])
