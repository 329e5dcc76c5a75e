"""Django app config for the record tables, ingest and retention."""

from __future__ import annotations

from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "webapp.traces"
    label = "traces"
    verbose_name = "nettrail traces"
    default_auto_field = "django.db.models.BigAutoField"
