"""Stored connection summaries as Zeek's conn.log: `format=zeek` on the report endpoints.

GET /api/report?...&format=zeek and /api/connections/<uuid>/export?format=zeek stream the
`connection` records in scope (hosts, connection, time range of the filter) and the
summaries folded sockets' final `tcp_lifecycle` records stand for, in start order,
through xo/zeek.py, for captures and live connections alike. `#open`/`#close`
are the first and last connection's times, so the same data always exports the same
bytes. A live connection this host accepted is written with the remote side as the
originator, as its conn_state and history have it (the connection row's `active`). Raises ExportUnavailable (HTTP 409) before writing anything when there is none.
Keep in sync with: xo/zeek.py, docs/reports.md, webapp/reports/views.py.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from typing import Any, TextIO

from django.db.models import Max, Min

from analysis.export.filters import ReportFilter
from translators.records import Connection
from webapp.reports.exports import ExportUnavailable
from webapp.reports.render import as_records, scoped
from webapp.traces import folded
from webapp.traces.models import Connection as ConnectionRow
from xo.zeek import ZeekConnWriter

CHUNK = 500  # records per lookup of their connection rows (conn_uuid IN (...))


def _opened_here(chunk: list[Any]) -> dict[tuple[str, str], bool]:
    """(host, conn_uuid) -> whether that host opened the connection (the row's `active`,
    from its tcp_state records), for the live summaries of the chunk: a connection the
    host accepted is written with the remote side as the originator (xo/zeek.py)."""
    uuids = {rec.conn_uuid for rec in chunk if rec.source == "kernel" and rec.conn_uuid}
    if not uuids:
        return {}
    rows = ConnectionRow.objects.filter(conn_uuid__in=sorted(uuids), active__isnull=False)
    return {(host, uuid): active for host, uuid, active in rows.values_list("host_id", "conn_uuid", "active")}


def zeek_steps(out: TextIO, f: ReportFilter) -> Iterator[None]:
    """Writes conn.log, yielding after each line."""
    qs = scoped("connection", f)
    # tcp --tcp-fold: a folded socket's summary is in its (final) lifecycle (folded.py)
    lifecycles = scoped("tcp_lifecycle", f).filter(partial=False)
    spans = [q.aggregate(first=Min("ts_wall"), last=Max("ts_wall")) for q in (qs, lifecycles)]
    firsts = [s["first"] for s in spans if s["first"] is not None]
    if not firsts:
        raise ExportUnavailable("no connection summary in scope")
    span = {"first": min(firsts), "last": max(s["last"] for s in spans if s["last"] is not None)}
    writer = ZeekConnWriter(out, open_ts=span["first"])
    folded_ends = (
        part
        for rec in as_records(lifecycles.order_by("ts_wall", "seq"), "tcp_lifecycle")
        for part in folded.parts(rec)
        if isinstance(part, Connection)
    )
    records = heapq.merge(
        as_records(qs.order_by("ts_wall", "seq"), "connection"), folded_ends, key=lambda r: (r.ts_wall, r.seq)
    )
    while chunk := list(itertools.islice(records, CHUNK)):
        active = _opened_here(chunk)
        for rec in chunk:
            assert isinstance(rec, Connection)
            writer.write(rec, active.get((rec.host_id, rec.conn_uuid or "")))
            yield None
    writer.close(span["last"])
    yield None
