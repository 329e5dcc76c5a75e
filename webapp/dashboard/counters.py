"""The counters page's data: per-flow IP counters (``ip_flow_counters``, the ip-flows
provider's exact in-kernel counts) as one sortable row per flow, and the TCP/IP stack
counters (``stack_counter``: MIB counters that moved, per network namespace, every
namespace of the host read by the collector) over time, per namespace and summed.

A flow's totals are the sum of its reports' deltas: each report's delta counts from the
entry's previous report, or from zero for an entry that is new (a collector start, an
entry evicted and recreated), so the sum stays right where a report's cumulative
``packets`` would restart. Keep in sync with: js/counters.js, api.py (ip_flows,
stack_counters), translators/records.py (IpFlowCounters, StackCounter), docs/dashboard.md.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max, Min, OuterRef, Subquery, Sum

from webapp.dashboard.buckets import bucketed
from webapp.dashboard.tables import IpFlowCounters, StackCounter

MAX_FLOWS = 500
MAX_TIMELINE_REPORTS = 50_000  # newest stack counter reports bucketed into the chart
TOP_COUNTERS = 16  # more than the collector selects: every counter gets its own series
MAX_STACK_ROWS = 200
MAX_NAMESPACES = 200  # rows of the namespaces table, newest move first
NO_LABEL: dict[str, Any] = {"netns_name": None, "pid": None, "comm": None}
FLOW_KEY: tuple[str, ...] = ("host_id", "netns", "if_index", "direction", "ip_ver", "protocol", "protocol_name")
FLOW_KEY += ("src", "sport", "dst", "dport")
# sort key -> column of the annotated rows; "-key" descends
FLOW_SORTS = {"bytes": "bytes", "packets": "packets", "last": "last", "first": "first"}
DEFAULT_FLOW_SORT = "-bytes"


class SortError(ValueError):
    """An unknown sort key; the message names the allowed ones."""


def _order(sort: str) -> list[str]:
    key = sort.removeprefix("-")
    if key not in FLOW_SORTS:
        allowed = ", ".join(f"{k}, -{k}" for k in FLOW_SORTS)
        raise SortError(f"sort must be one of {allowed}; got {sort!r}")
    column = ("-" if sort.startswith("-") else "") + FLOW_SORTS[key]
    return [column, *FLOW_KEY]  # ties in a stable order


def ip_flows(host: str | None, sort: str) -> dict[str, Any]:
    """One row per flow (host, netns, interface, direction, protocol, 4-tuple), sorted."""
    qs = IpFlowCounters.objects.all()
    if host:
        qs = qs.filter(host_id=host)
    rows = (
        qs.values(*FLOW_KEY)
        .annotate(
            packets=Sum("packets_delta"),
            bytes=Sum("bytes_delta"),
            reports=Count("id"),
            first=Min("ts_wall"),
            last=Max("ts_wall"),
        )
        .order_by(*_order(sort))
    )
    total = rows.count()
    return {"flows": list(rows[:MAX_FLOWS]), "total": total, "sort": sort}


def _latest(field: str, *key: str) -> Subquery:
    """`field` of the newest report of the same `key` (the outer row's values)."""
    same = StackCounter.objects.filter(**{k: OuterRef(k) for k in key})
    return Subquery(same.order_by("-ts_wall", "-seq").values(field)[:1])


def _namespaces(qs: Any) -> list[dict[str, Any]]:
    """One row per (host, namespace): its name and the process read in it (from its newest
    report), its reports and last move, newest first."""
    rows = list(
        qs.values("host_id", "netns")
        .annotate(reports=Count("id"), last=Max("ts_wall"), newest=_latest("id", "host_id", "netns"))
        .order_by("-last", "host_id", "netns")[:MAX_NAMESPACES]
    )
    names = StackCounter.objects.filter(id__in=[r["newest"] for r in rows]).values("id", "netns_name", "pid", "comm")
    label = {n.pop("id"): n for n in names}
    for row in rows:
        row.update(label.get(row.pop("newest"), NO_LABEL))
    return rows


def _summed(qs: Any) -> list[dict[str, Any]]:
    """Per host and counter, every namespace summed: the increase its reports saw and how
    many namespaces moved it (no value: the namespaces' values count from their own starts)."""
    rows = qs.values("host_id", "mib", "counter").annotate(
        increase=Sum("delta"), namespaces=Count("netns", distinct=True), reports=Count("id"), last=Max("ts_wall")
    )
    return list(rows.order_by("-last", "host_id", "mib", "counter"))


def stack_counters(host: str | None, netns: int | None = None) -> dict[str, Any]:
    """{timeline: deltas per counter over time (every namespace of a host summed, or the one
    `netns` names), summed: per host and counter all namespaces summed, latest: per counter
    and namespace its last value, increase over the reports and last move, namespaces: each
    namespace with its name or the process read in it}."""
    qs = StackCounter.objects.all()
    if host:
        qs = qs.filter(host_id=host)
    if netns is not None:
        qs = qs.filter(netns=netns)
    reports = qs.order_by("-ts_wall").values_list("ts_wall", "mib", "counter", "delta")[:MAX_TIMELINE_REPORTS]
    timeline = bucketed([(t, f"{mib} {name}", delta) for t, mib, name, delta in reports], TOP_COUNTERS, "counter")
    latest = (
        qs.values("host_id", "netns", "mib", "counter")
        .annotate(
            increase=Sum("delta"),
            reports=Count("id"),
            last=Max("ts_wall"),
            value=_latest("value", "host_id", "netns", "mib", "counter"),
        )
        .order_by("-last", "host_id", "netns", "mib", "counter")[:MAX_STACK_ROWS]
    )
    namespaces = _namespaces(qs)
    label = {(n["host_id"], n["netns"]): {k: n[k] for k in ("netns_name", "pid", "comm")} for n in namespaces}
    rows = [{**r, **label.get((r["host_id"], r["netns"]), NO_LABEL)} for r in latest]
    return {"timeline": timeline, "summed": _summed(qs), "latest": rows, "namespaces": namespaces}
