"""Django app config of the browser dashboard (pages, page JS, /api/dash/ JSON views).

The project's settings add ``webapp.dashboard`` to INSTALLED_APPS when this module exists.
"""

from __future__ import annotations

from django.apps import AppConfig


class DashboardConfig(AppConfig):
    name = "webapp.dashboard"
    label = "dashboard"
    verbose_name = "nettrail dashboard"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.core import checks

        from webapp.dashboard.checks import uplot_installed

        checks.register(uplot_installed)
