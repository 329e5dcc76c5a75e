"""Django app for /metrics (listed in settings._OPTIONAL_APPS); registers the store hook."""

from __future__ import annotations

from django.apps import AppConfig


class MetricsConfig(AppConfig):
    name = "webapp.metrics"
    label = "metrics"
    verbose_name = "nettrail Prometheus metrics"

    def ready(self) -> None:
        from webapp.metrics import counting
        from webapp.traces import store

        if counting.count_stored not in store.STORE_HOOKS:
            store.STORE_HOOKS.append(counting.count_stored)
