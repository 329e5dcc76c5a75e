"""Dashboard-only state: who acknowledged which alert, and when.

Alert records themselves live in the traces app's ``Alert`` table (written by ingest,
never edited); an acknowledgement is a separate row so ingest and retention stay the
only writers of record tables. Keep in sync with: api.py (alerts list and ack view).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class AlertAck(models.Model):
    """One acknowledgement of one stored alert record."""

    alert = models.OneToOneField("traces.Alert", on_delete=models.CASCADE, related_name="ack")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True)
    at = models.DateTimeField(auto_now_add=True)
    note = models.CharField(max_length=500, blank=True, default="")

    def __str__(self) -> str:
        return f"alert {self.alert_id} acknowledged by {self.user}"
