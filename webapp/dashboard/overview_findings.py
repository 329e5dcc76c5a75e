"""The Overview's findings: open ones first, the most severe first, then the most recent.

Issue 34 item 1: the Overview's "Latest alerts" listed the ten newest notices of a flood
and hid the warning behind them. A finding (one alert per fix target, with its member
sockets: analysis/alerts/rules/groups.py) is ranked here by what an engineer should look
at first: open before closed, critical before warning before notice before info, then
the latest version's time (its numbers' recency: versions are re-emitted while they move).
Closed ones follow so that a quiet host still shows its recent history.
Keep in sync with api.py (overview), alert_versions.py (the newest version of each
(host, alert_id)), translators.records SEVERITIES and docs/dashboard.md.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Case, IntegerField, QuerySet, Value, When

from translators.records import SEVERITIES


def ranked(qs: QuerySet[Any]) -> QuerySet[Any]:
    """``qs`` (newest versions only) ordered: open first, by severity, then by recency."""
    severity = Case(
        *(When(severity=name, then=Value(rank)) for rank, name in enumerate(SEVERITIES)),
        default=Value(-1),
        output_field=IntegerField(),
    )
    is_open = Case(When(status="open", then=Value(1)), default=Value(0), output_field=IntegerField())
    return qs.annotate(finding_open=is_open, finding_rank=severity).order_by(
        "-finding_open", "-finding_rank", "-ts_wall", "-id"
    )
