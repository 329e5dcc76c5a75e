"""The buffers page's drop breakdowns read from the counts ingest keeps
(webapp/traces/drop_summary.py) instead of grouping every stored skb_drop row.

``breakdowns(host, reason, unix)`` answers what buffers.summary computed from the rows
when no flow is chosen: drops by reason and kernel location, by process, the reasons
offered, how many unix-socket drops were left out, and the stacked timeline of the
newest MAX_TIMELINE_DROPS drops. The counts are the same (tests/test_drop_summary.py
compares them with the row queries); the timeline's drops are placed at their whole
second (the chart's buckets are at least a second wide) and its newest drops are taken
in whole seconds, so the oldest second it shows may add a few drops past the limit.
A chosen flow (conn) still reads its own rows: one connection's drops are few.
Keep in sync with: buffers.py (summary, the row queries), js/buffers.js.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet, Sum

from webapp.dashboard.buckets import bucketed
from webapp.traces.drop_summary import NULL_COMM, NULL_LOCATION, NULL_REASON, NULL_TGID
from webapp.traces.models import DropByLocation, DropByProcess, DropBySecond

FIRST_READ = 2000  # timeline rows read first; more only when they hold fewer drops than wanted


def _value(value: Any, nulls: int, bit: int) -> Any:
    return None if nulls & bit else value


def _filtered(qs: QuerySet[Any], host: str | None, reason: str | None) -> QuerySet[Any]:
    if host:
        qs = qs.filter(host_id=host)
    if reason:  # a NULL reason is stored as "" (with its bit): never a chosen reason
        qs = qs.filter(drop_reason_str=reason)
    return qs


def breakdowns(
    host: str | None, reason: str | None, unix: bool, unix_drop: Q, top_reasons: int, max_rows: int, max_drops: int
) -> dict[str, Any]:
    """unix_drop: buffers.UNIX_DROP (a filter on drop_location); the limits are buffers.py's."""
    locations = _filtered(DropByLocation.objects.all(), host, None)
    unix_drops = locations.filter(unix_drop).aggregate(n=Sum("n"))["n"] or 0
    processes = _filtered(DropByProcess.objects.all(), host, reason)
    seconds = _filtered(DropBySecond.objects.all(), host, reason)
    if not unix:
        locations = locations.exclude(unix_drop)
        processes = processes.filter(unix=False)
        seconds = seconds.filter(unix=False)
    reasons = {
        _value(r, nulls & NULL_REASON, NULL_REASON)
        for r, nulls in locations.values_list("drop_reason_str", "nulls").distinct()
    }
    selected = _filtered(locations, None, reason)
    by_location = [
        {
            "drop_reason_str": _value(r["drop_reason_str"], r["nulls"], NULL_REASON),
            "drop_location": _value(r["drop_location"], r["nulls"], NULL_LOCATION),
            "n": int(r["n"]),
        }
        for r in selected.values("drop_reason_str", "drop_location", "nulls")
        .annotate(n=Sum("n"))
        .order_by("-n")[:max_rows]
    ]
    by_process = [
        {
            "comm": _value(r["comm"], r["nulls"], NULL_COMM),
            "tgid": _value(r["tgid"], r["nulls"], NULL_TGID),
            "n": int(r["n"]),
        }
        for r in processes.values("comm", "tgid", "nulls").annotate(n=Sum("n")).order_by("-n")[:max_rows]
    ]
    return {
        "timeline": _timeline(seconds, top_reasons, max_drops),
        "by_location": by_location,
        "by_process": by_process,
        "reasons": sorted(reasons, key=lambda r: (r is None, r or "")),
        "unix_drops": int(unix_drops),
    }


def _timeline(seconds: QuerySet[DropBySecond], top: int, max_drops: int) -> dict[str, Any]:
    """The newest max_drops drops (whole seconds) in buckets, as buffers._timeline had them."""
    newest = seconds.order_by("-second").values_list("second", "drop_reason_str", "nulls", "n")
    rows: list[tuple[float, Any, int]] = []
    for limit in (FIRST_READ, None):
        read = list(newest[:limit] if limit else newest)
        rows, total = [], 0
        for second, reason, nulls, n in read:
            if total >= max_drops and second != rows[-1][0]:
                break  # the limit reached, and the last second taken whole
            rows.append((second, _value(reason, nulls, NULL_REASON), int(n)))
            total += n
        if total >= max_drops or limit is None or len(read) < limit:
            break
    return bucketed([(float(t), r, n) for t, r, n in rows], top, "reason")
