"""One alert, one row in the dashboard: the newest stored version of each (host, alert_id).

The engine emits an alert again (same ``alert_id``) when it escalates, fires again or
closes; ingest stores every version (records are never edited). The dashboard's alert
views show only the newest version of each alert (the highest row id: versions arrive in
order), and an acknowledgement of any version holds for the alert. An alert is its
host's: every lookup here is keyed by (host_id, alert_id), so one host's record with
another host's alert_id (a forged one, or a capture uploaded under two names) neither
hides, closes nor acknowledges the other's (issue 33 item 3). Alerts stored without an
alert_id (older collectors) are shown as they are. The lookups by alert_id use the alert
table's (alert_id, ts_wall) index (schema.record_indexes; alert_id is an indexed field)
and filter the host there: an id's versions are few rows. Keep in sync with api.py
(alerts, overview, ack), detail.py (a connection's alerts), captures.py, selfhealth.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from webapp.dashboard.models import AlertAck
from webapp.dashboard.tables import Alert, CollectorStats, CollectorStatus


def latest(qs: QuerySet[Any]) -> QuerySet[Any]:
    """``qs`` restricted to the newest version of each alert (filters apply after the pick):
    no later row of the same host and alert_id exists. A row without an alert_id never
    equals another (NULL = NULL is not true), so it is always shown. One NOT EXISTS, no OR,
    so PostgreSQL plans an anti-join: a hash join for the whole list, and for a narrow
    filter (a host's connection) a probe of the (alert_id, ts_wall) index per row."""
    newer = Alert.objects.filter(host_id=OuterRef("host_id"), alert_id=OuterRef("alert_id"), id__gt=OuterRef("id"))
    return qs.filter(~Exists(newer))


def acked() -> Q:
    """Alerts with an acknowledgement on any of their versions (the same host's)."""
    same = AlertAck.objects.filter(alert__alert_id=OuterRef("alert_id"), alert__host_id=OuterRef("host_id"))
    return Q(ack__isnull=False) | (Q(alert_id__isnull=False) & Q(Exists(same)))


def ack_of(alert: Any) -> AlertAck | None:
    """The acknowledgement of this version, else of an earlier version of the same alert."""
    try:
        return alert.ack  # type: ignore[no-any-return]
    except AlertAck.DoesNotExist:
        pass
    if alert.alert_id is None:
        return None
    acks = AlertAck.objects.select_related("user").filter(alert__alert_id=alert.alert_id, alert__host_id=alert.host_id)
    newest: AlertAck | None = acks.order_by("-at").first()
    return newest


def acks_of(rows: list[Any]) -> dict[int, AlertAck | None]:
    """ack_of() for a page of rows (row pk -> ack) in at most one query, not one per row:
    a row's own acknowledgement (select_related by the caller), else the newest of the
    same (host_id, alert_id)'s versions."""
    out: dict[int, AlertAck | None] = {}
    wanted: dict[AlertKey, list[int]] = {}
    for alert in rows:
        try:
            out[alert.pk] = alert.ack
            continue
        except AlertAck.DoesNotExist:
            out[alert.pk] = None
        key = key_of(alert)
        if key is not None:
            wanted.setdefault(key, []).append(alert.pk)
    if not wanted:
        return out
    # (alert_id, ts_wall) index on the alert side; the pairs are checked below, as in history()
    acks = AlertAck.objects.select_related("user", "alert").filter(
        alert__alert_id__in=sorted({a for _, a in wanted}), alert__host_id__in=sorted({h for h, _ in wanted})
    )
    for ack in acks.order_by("-at"):  # the newest first: the first seen of a key is ack_of()'s
        for pk in wanted.pop((ack.alert.host_id, ack.alert.alert_id), []):
            out[pk] = ack
    return out


def _values(row: dict[str, Any]) -> dict[str, Any]:
    return {"metric": row["metric"], "count": row["count"], "message": row["message"], "ts": row["ts_wall"]}


AlertKey = tuple[str, str]  # (host_id, alert_id): an alert is its host's


def key_of(alert: Any) -> AlertKey | None:
    """The alert's (host_id, alert_id), None for one stored without an alert_id."""
    return (alert.host_id, alert.alert_id) if alert.alert_id else None


def history(keys: Iterable[AlertKey]) -> dict[AlertKey, dict[str, Any]]:
    """Per (host_id, alert_id): its first version's numbers, its worst (the highest ``metric``,
    the latest of equals; without metrics the highest count) and how many versions arrived.

    The row shows the newest version's numbers (the current ones, replaced live as each
    new version arrives); first and worst say how it started and how bad it got, so an
    alert that fired at 2.0 % and grew to 5.2 % reads as such (issue 18 item 6).
    """
    wanted = set(keys)
    if not wanted:
        return {}
    cols = ("host_id", "alert_id", "id", "metric", "count", "message", "ts_wall")
    # index (alert_id, ts_wall); the host filter narrows it, and the pairs are checked below
    # (host a's id x and host b's id y must not bring in b's x)
    rows = (
        Alert.objects.filter(alert_id__in=sorted({a for _, a in wanted}), host_id__in=sorted({h for h, _ in wanted}))
        .order_by("id")
        .values(*cols)
    )
    out: dict[AlertKey, dict[str, Any]] = {}
    for row in rows:
        key = (row["host_id"], row["alert_id"])
        if key not in wanted:
            continue
        entry = out.get(key)
        if entry is None:
            out[key] = {"first": _values(row), "worst": _values(row), "versions": 1}
            continue
        entry["versions"] += 1
        worst = entry["worst"]
        rank = (row["metric"] if row["metric"] is not None else float("-inf"), row["count"] or 0)
        worst_rank = (worst["metric"] if worst["metric"] is not None else float("-inf"), worst["count"] or 0)
        if rank >= worst_rank:
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
