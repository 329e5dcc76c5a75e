"""The Overview's per-host counts that read many rows, for every live host at once.

api.overview used to count, per host, each record table's rows of the last seconds and
the host's open connections: one query per (host, record kind), ~25 per host. Here each
is one grouped query for all hosts: the record counts one UNION ALL over the record
tables (each part an index range of (host_id, ts_wall) per host), the open connections
one GROUP BY over the partial index nt_conn_open (migration 0030). COUNT(*), not
COUNT(id): with no column to read PostgreSQL answers from the index alone. The answers are the
same counts (tests/test_overview_counts.py compares them with a count per host).
Keep in sync with: api._host_counters, webapp/traces/models.py (Connection indexes).
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import Count

from webapp.traces.models import KIND_MODELS, Connection


def records_since(hosts: Sequence[str], since: float) -> dict[str, int]:
    """host -> records of every kind with ts_wall >= since (0 for a host with none)."""
    out = dict.fromkeys(hosts, 0)
    if not hosts:
        return out
    parts = [
        model.objects.filter(host_id__in=list(hosts), ts_wall__gte=since)
        .values("host_id")
        .annotate(n=Count("*"))
        .order_by()
        for model in KIND_MODELS.values()
    ]
    first, *rest = parts
    for row in first.union(*rest, all=True):
        out[row["host_id"]] += row["n"]
    return out


def open_connections(hosts: Sequence[str]) -> dict[str, int]:
    """host -> its connections not closed (0 for a host with none)."""
    out = dict.fromkeys(hosts, 0)
    if not hosts:
        return out
    rows = Connection.objects.filter(host_id__in=list(hosts), closed=False).values("host_id").annotate(n=Count("*"))
    for row in rows.order_by():
        out[row["host_id"]] = row["n"]
    return out
