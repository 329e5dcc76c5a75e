"""Stored connection summaries as Zeek's conn.log: `format=zeek` on the report endpoints.

GET /api/report?...&format=zeek and /api/connections/<uuid>/export?format=zeek stream the
`connection` records in scope (hosts, connection, time range of the filter), in start
order, through xo/zeek.py, for captures and live connections alike. `#open`/`#close`
are the first and last connection's times, so the same data always exports the same
bytes. Raises ExportUnavailable (HTTP 409) before writing anything when there is none.
Keep in sync with: xo/zeek.py, docs/reports.md, webapp/reports/views.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TextIO

from django.db.models import Max, Min

from analysis.export.filters import ReportFilter
from translators.records import Connection
from webapp.reports.exports import ExportUnavailable
from webapp.reports.render import as_records, scoped
from xo.zeek import ZeekConnWriter


def zeek_steps(out: TextIO, f: ReportFilter) -> Iterator[None]:
    """Writes conn.log, yielding after each line."""
    qs = scoped("connection", f)
    span = qs.aggregate(first=Min("ts_wall"), last=Max("ts_wall"))
    if span["first"] is None:
        raise ExportUnavailable("no connection summary in scope")
    writer = ZeekConnWriter(out, open_ts=span["first"])
    for rec in as_records(qs.order_by("ts_wall", "seq"), "connection"):
        assert isinstance(rec, Connection)
        writer.write(rec)
        yield None
    writer.close(span["last"])
    yield None
