"""Django app for report and export downloads (listed in settings._OPTIONAL_APPS)."""

from __future__ import annotations

from django.apps import AppConfig


class ReportsConfig(AppConfig):
    name = "webapp.reports"
    label = "reports"
    verbose_name = "nettrail reports and exports"
