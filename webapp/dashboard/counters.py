"""The counters page's data: per-flow IP counters (``ip_flow_counters``, the ip-flows
provider's exact in-kernel counts) as one sortable row per flow, and the TCP/IP stack
counters (``stack_counter``, /proc/net MIB counters that moved) over time.

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


def _latest_value() -> Subquery:
    same = StackCounter.objects.filter(
        host_id=OuterRef("host_id"), netns=OuterRef("netns"), mib=OuterRef("mib"), counter=OuterRef("counter")
    )
    return Subquery(same.order_by("-ts_wall", "-seq").values("value")[:1])


def stack_counters(host: str | None) -> dict[str, Any]:
    """{timeline: deltas per counter over time (all namespaces summed), latest: per counter
    and namespace its last value, increase over the reports and last move}."""
    qs = StackCounter.objects.all()
    if host:
        qs = qs.filter(host_id=host)
    reports = qs.order_by("-ts_wall").values_list("ts_wall", "mib", "counter", "delta")[:MAX_TIMELINE_REPORTS]
    timeline = bucketed([(t, f"{mib} {name}", delta) for t, mib, name, delta in reports], TOP_COUNTERS, "counter")
    latest = (
        qs.values("host_id", "netns", "mib", "counter")
        .annotate(increase=Sum("delta"), reports=Count("id"), last=Max("ts_wall"), value=_latest_value())
        .order_by("-last", "host_id", "mib", "counter")[:MAX_STACK_ROWS]
    )
    return {"timeline": timeline, "latest": list(latest)}
