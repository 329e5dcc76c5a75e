"""Dashboard URLs: the pages (/, /connections/, /buffers/, /udp/, /counters/, /alerts/, /status/) and their
JSON views under /api/dash/ (static files are served by WhiteNoise, webapp/settings.py). Included by webapp/urls.py ahead of the minimal home page.
Keep in sync with: views.py, api.py, the fetch() URLs in static/dashboard/js/.
"""

from __future__ import annotations

from django.urls import URLPattern, path
from django.views.generic import RedirectView

from webapp.dashboard import api, stitched, tracing, views

app_name = "dashboard"

urlpatterns: list[URLPattern] = [
    path("", views.overview, name="overview"),
    path("connections/", views.connections, name="connections"),
    path("connections/<str:uuid>/", views.connection, name="connection"),
    path("buffers/", views.buffers, name="buffers"),
    path("udp/", views.udp, name="udp"),
    path("counters/", views.counters, name="counters"),
    path("alerts/", views.alerts, name="alerts"),
    path("status/", views.status, name="status"),
    path("status/tracing/", tracing.tracing_page, name="tracing"),
    path("captures/", views.captures_page, name="captures"),
    path("api/dash/overview", api.overview, name="api-overview"),
    path("api/dash/connections", api.connections, name="api-connections"),
    path("api/dash/connections/<str:uuid>", api.connection, name="api-connection"),
    path("api/dash/connections/<str:uuid>/stitched", stitched.api_stitched, name="api-stitched"),
    # The connection's downloads are the report documents of webapp/reports (one exporter,
    # issue 14); the dashboard's old export URL redirects there with its query string.
    path(
        "api/dash/connections/<str:conn_uuid>/export",
        api.api("GET")(RedirectView.as_view(pattern_name="connection-export", query_string=True, permanent=True)),
        name="api-export",
    ),
    path("api/dash/buffers", api.buffers_view, name="api-buffers"),
    path("api/dash/skb/<int:uid>", api.skb, name="api-skb"),
    path("api/dash/udp", api.udp, name="api-udp"),
    path("api/dash/ip-flows", api.ip_flows, name="api-ip-flows"),
    path("api/dash/stack-counters", api.stack_counters, name="api-stack-counters"),
    path("api/dash/alerts", api.alerts, name="api-alerts"),
    path("api/dash/status", api.status, name="api-status"),
    path("api/dash/alerts/<int:alert_id>/ack", api.alert_ack, name="api-alert-ack"),
    path("api/dash/alerts/<int:alert_id>/evidence", api.alert_evidence, name="api-alert-evidence"),
]
