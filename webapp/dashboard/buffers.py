"""The buffers page's data: drop reasons over time (stacked), by kernel location and by
process, exact in-kernel drop counts, recent drops, and the lifecycles of the buffers of
a selected flow or drop reason (the newest buffers followed when none is chosen).

Exact counts come from ``drop_count`` records (in-kernel map deltas, never sampled);
the per-drop breakdowns come from ``skb_drop`` events, which may be sampled — the page
says so. Drops of unix-socket buffers are left out unless asked for (``unix=True``, the
API's ``unix=1``): a browser closing its unix sockets drowned every other process
(issue 34). With no flow chosen, the breakdowns, reasons and timeline are read from the
counts ingest keeps (drop_summaries.py), not grouped from every stored drop (issue 31).
Keep in sync with: js/buffers.js, detail.lifecycles(), docs/dashboard.md.
"""

from __future__ import annotations

from typing import Any

from django.db.models import BooleanField, Count, Max, Q, QuerySet, Sum
from django.db.models.expressions import RawSQL

from webapp.dashboard import conn_drops, drop_summaries
from webapp.dashboard.buckets import bucketed
from webapp.dashboard.detail import lifecycles
from webapp.dashboard.tables import DropCount, SkbDrop, SkbEvent
from webapp.traces.models import Connection
from webapp.traces.schema import FIRST_STAGES

MAX_TIMELINE_DROPS = 50_000  # newest drops bucketed into the stacked chart
TOP_REASONS = 8  # stacked series; the rest are summed as "other"
MAX_ROWS = 100
MAX_LIFECYCLES = 50
# Where the kernel frees a unix socket's buffers: af_unix's own functions
# (unix_release_sock on close, unix_stream_read_generic, ...); the symbol keeps its offset.
UNIX_LOCATION_PREFIX = "unix_"
UNIX_DROP = Q(drop_location__startswith=UNIX_LOCATION_PREFIX)


def drop_rates(host: str, since: float) -> dict[str, int]:
    """Drops per reason since ``since``: exact deltas when the host reports them, else events."""
    exact = (
        DropCount.objects.filter(host_id=host, ts_wall__gte=since).values("drop_reason_str").annotate(n=Sum("delta"))
    )
    counts = {r["drop_reason_str"]: int(r["n"] or 0) for r in exact}
    if counts:
        return counts
    events = SkbDrop.objects.filter(host_id=host, ts_wall__gte=since).values("drop_reason_str").annotate(n=Count("id"))
    return {r["drop_reason_str"]: r["n"] for r in events}


def _timeline(drops: QuerySet[SkbDrop]) -> dict[str, Any]:
    rows = drops.order_by("-ts_wall").values_list("ts_wall", "drop_reason_str")[:MAX_TIMELINE_DROPS]
    return bucketed([(t, reason, 1) for t, reason in rows], TOP_REASONS, "reason")


def summary(
    host: str | None, reason: str | None, conn: str | None, unix: bool = False, from_rows: bool = False
) -> dict[str, Any]:
    """from_rows: the breakdowns grouped from the skb_drop rows even with no flow chosen
    (the tests' reference); otherwise from the counts ingest keeps (drop_summaries.py)."""
    drops = SkbDrop.objects.all()
    exact = DropCount.objects.all()
    if host:
        drops = drops.filter(host_id=host)
        exact = exact.filter(host_id=host)
    rows = from_rows or bool(conn)  # a flow's drops are few: grouped from its rows
    if not rows:
        counted = drop_summaries.breakdowns(host, reason, unix, UNIX_DROP, TOP_REASONS, MAX_ROWS, MAX_TIMELINE_DROPS)
    # how many unix-socket drops the page leaves out, so its control can say so
    unix_drops = drops.filter(UNIX_DROP).count() if rows else counted["unix_drops"]
    if not unix:
        drops = drops.exclude(UNIX_DROP)
        exact = exact.exclude(UNIX_DROP)
    selected = drops
    if reason:
        selected = selected.filter(drop_reason_str=reason)
    if conn:
        # the connection's own drops and its packets' dropped where no socket held them
        # (forwarded: matched by 4-tuple, conn_drops.py), as its page lists them
        row = Connection.objects.filter(conn_uuid=conn, **({"host_id": host} if host else {})).first()
        selected = selected.filter(conn_drops.for_connection_q(row) if row else Q(conn_uuid=conn))
    # The chart and the breakdowns follow the chosen reason or flow (choosing NETFILTER_DROP
    # still charted every reason, issue 18 item 3); the reason list offers every reason.
    if rows:
        by_location = selected.values("drop_reason_str", "drop_location").annotate(n=Count("id")).order_by("-n")
        by_process = selected.values("comm", "tgid").annotate(n=Count("id")).order_by("-n")
        counted = {
            "timeline": _timeline(selected),
            "by_location": list(by_location[:MAX_ROWS]),
            "by_process": list(by_process[:MAX_ROWS]),
            "reasons": sorted(set(drops.values_list("drop_reason_str", flat=True).distinct())),
        }
    exact_rows = (
        exact.values("host_id", "drop_reason_str", "drop_location")
        .annotate(total=Max("count"), recent=Sum("delta"))
        .order_by("-total")[:MAX_ROWS]
    )
    recent_cols = (
        "id",
        "ts_wall",
        "host_id",
        "drop_reason_str",
        "drop_location",
        "len",
        "skb_uid",
        "conn_uuid",
        "comm",
        "tgid",
        "src",
        "sport",
        "dst",
        "dport",
        "l4_proto",
    )
    recent = list(selected.order_by("-ts_ns").values(*recent_cols)[:MAX_ROWS])
    conn_drops.link_socketless(recent)
    return {
        "timeline": counted["timeline"],
        "by_location": counted["by_location"],
        "by_process": counted["by_process"],
        "exact": list(exact_rows),
        "recent": recent,
        "reasons": counted["reasons"],
        "unix": {"included": unix, "drops": unix_drops},
        # nothing chosen: the newest buffers followed (one in --skb-sample N on a live host)
        "lifecycles": lifecycles(_selected_uids(selected, conn) if (reason or conn) else _recent_uids(host), host),
    }


def _recent_uids(host: str | None) -> list[int]:
    """The newest buffers whose first sighting was recorded (complete lifecycles first seen).

    One query per first stage, each down that stage's partial index (schema.FIRST_STAGES;
    the stage a literal, which SQLite needs to use it), the two merged newest first."""
    newest: list[tuple[int, int]] = []
    for stage in FIRST_STAGES:
        firsts = SkbEvent.objects.filter(RawSQL(f"stage = '{stage}'", [], output_field=BooleanField()))
        firsts = firsts.filter(skb_uid__isnull=False)
        if host:
            firsts = firsts.filter(host_id=host)
        newest += firsts.order_by("-ts_ns").values_list("ts_ns", "skb_uid")[:MAX_LIFECYCLES]
    newest.sort(key=lambda row: -row[0])
    return [uid for _ts, uid in newest[:MAX_LIFECYCLES]]


def _selected_uids(selected: QuerySet[SkbDrop], conn: str | None) -> list[int]:
    uids = [u for u in selected.order_by("-ts_ns").values_list("skb_uid", flat=True)[:MAX_LIFECYCLES] if u is not None]
    if conn and len(uids) < MAX_LIFECYCLES:  # a flow's buffers that were not dropped, too
        more = SkbEvent.objects.filter(conn_uuid=conn, skb_uid__isnull=False).order_by("-ts_ns")
        for uid in more.values_list("skb_uid", flat=True).distinct()[: MAX_LIFECYCLES * 4]:
            if uid not in uids:
                uids.append(uid)
            if len(uids) >= MAX_LIFECYCLES:
                break
    return uids
