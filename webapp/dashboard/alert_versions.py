"""One alert, one row in the dashboard: the newest stored version of each alert_id.

The engine emits an alert again (same ``alert_id``) when it escalates, fires again or
closes; ingest stores every version (records are never edited). The dashboard's alert
views show only the newest version of each id (the highest row id: versions arrive in
order), and an acknowledgement of any version holds for the alert. Alerts stored
without an alert_id (older collectors) are shown as they are. Keep in sync with
api.py (alerts, overview, ack) and detail.py (a connection's alerts).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Exists, Max, OuterRef, Q, QuerySet, Subquery

from webapp.dashboard.models import AlertAck
from webapp.dashboard.tables import Alert, CollectorStats, CollectorStatus


def latest(qs: QuerySet[Any]) -> QuerySet[Any]:
    """``qs`` restricted to the newest version of each alert (filters apply after the pick)."""
    newest = Alert.objects.filter(alert_id__isnull=False).values("alert_id").annotate(m=Max("id")).values("m")
    return qs.filter(Q(alert_id__isnull=True) | Q(id__in=Subquery(newest)))


def acked() -> Q:
    """Alerts with an acknowledgement on any of their versions."""
    same = AlertAck.objects.filter(alert__alert_id=OuterRef("alert_id"))
    return Q(ack__isnull=False) | (Q(alert_id__isnull=False) & Q(Exists(same)))


def ack_of(alert: Any) -> AlertAck | None:
    """The acknowledgement of this version, else of an earlier version of the same alert."""
    try:
        return alert.ack  # type: ignore[no-any-return]
    except AlertAck.DoesNotExist:
        pass
    if alert.alert_id is None:
        return None
    acks = AlertAck.objects.select_related("user").filter(alert__alert_id=alert.alert_id)
    newest: AlertAck | None = acks.order_by("-at").first()
    return newest


def _values(row: dict[str, Any]) -> dict[str, Any]:
    return {"metric": row["metric"], "count": row["count"], "message": row["message"], "ts": row["ts_wall"]}


def history(alert_ids: list[str]) -> dict[str, dict[str, Any]]:
    """Per alert_id: its first version's numbers, its worst (the highest ``metric``, the
    latest of equals; without metrics the highest count) and how many versions arrived.

    The row shows the newest version's numbers (the current ones, replaced live as each
    new version arrives); first and worst say how it started and how bad it got, so an
    alert that fired at 2.0 % and grew to 5.2 % reads as such (issue 18 item 6).
    """
    cols = ("alert_id", "id", "metric", "count", "message", "ts_wall")
    rows = Alert.objects.filter(alert_id__in=[a for a in alert_ids if a]).order_by("id").values(*cols)
    out: dict[str, dict[str, Any]] = {}
    for row in rows:
        entry = out.get(row["alert_id"])
        if entry is None:
            out[row["alert_id"]] = {"first": _values(row), "worst": _values(row), "versions": 1}
            continue
        entry["versions"] += 1
        worst = entry["worst"]
        key = (row["metric"] if row["metric"] is not None else float("-inf"), row["count"] or 0)
        worst_key = (worst["metric"] if worst["metric"] is not None else float("-inf"), worst["count"] or 0)
        if key >= worst_key:
            entry["worst"] = _values(row)
    return out


def unfollowed(rows: list[Any]) -> dict[int, tuple[str, float]]:
    """Open alerts no engine follows any more -> (why, when): the first time after their
    newest version that their host's collector stopped ("stopped": a collector_stats
    marked ``stopped``) or started afresh ("restarted": a collector_status with
    ``untraced_ns`` null; a swap of programs sets it and keeps the engine). A restart's
    rule engine does not know the alerts of the one before, and a stopped one none at
    all, so such an alert keeps its last version for good. A collector killed outright
    says nothing until the next one starts."""
    open_rows = [a for a in rows if a.status == "open"]
    if not open_rows:
        return {}
    since: dict[str, float] = {}
    for a in open_rows:
        since[a.host_id] = min(a.ts_wall, since.get(a.host_id, a.ts_wall))
    ends: dict[str, list[tuple[float, str]]] = {}
    for host, t in since.items():
        starts = CollectorStatus.objects.filter(host_id=host, untraced_ns__isnull=True, ts_wall__gt=t)
        stops = CollectorStats.objects.filter(host_id=host, stopped=True, ts_wall__gt=t)
        ends[host] = sorted(
            [(when, "restarted") for when in starts.values_list("ts_wall", flat=True)]
            + [(when, "stopped") for when in stops.values_list("ts_wall", flat=True)]
        )
    out: dict[int, tuple[str, float]] = {}
    for a in open_rows:
        later = next(((why, when) for when, why in ends[a.host_id] if when > a.ts_wall), None)
        if later is not None:
            out[a.pk] = later
    return out
