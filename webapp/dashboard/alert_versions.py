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
from webapp.dashboard.tables import Alert


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
