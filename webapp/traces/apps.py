"""Django app config for the record tables, ingest and retention."""

from __future__ import annotations

from django.apps import AppConfig


class TracesConfig(AppConfig):
    name = "webapp.traces"
    label = "traces"
    verbose_name = "nettrail traces"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        from webapp.traces import drop_summary, store
        from webapp.traces.session_close import on_logout

        # The buffers page's drop counts, kept in the ingest transaction (drop_summary.py).
        if drop_summary.tally not in store.STORE_HOOKS:
            store.STORE_HOOKS.append(drop_summary.tally)

        # Logout closes the session's live websockets (webapp/traces/session_close.py).
        user_logged_out.connect(on_logout, dispatch_uid="nettrail-close-session-sockets")
