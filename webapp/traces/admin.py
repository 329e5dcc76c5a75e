"""Django admin views of hosts and tokens (staff only), for looking and revoking.

Tokens cannot be added here: `nettrail token create` is the one place a raw token is
made and shown. Keep in sync with webapp/traces/models.py.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from webapp.traces.models import Host, IngestToken


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ("name", "created", "last_seen", "tracing_providers")
    search_fields = ("name",)
    # Changed on the dashboard's tracing page only, where each value is checked and who set it is kept.
    readonly_fields = (
        "tracing_providers",
        "tracing_skb_sample",
        "tracing_skb_window",
        "tracing_set_by",
        "tracing_set_at",
    )


@admin.register(IngestToken)
class IngestTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "host", "label", "created", "last_used")
    list_filter = ("host",)
    readonly_fields = ("host", "prefix", "digest", "created", "last_used")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
