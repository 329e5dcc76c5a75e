"""Routes of the read API and the capture upload page (included by webapp/urls.py)."""

from __future__ import annotations

from django.urls import URLPattern, path

from webapp.api import schema_view, upload, views

urlpatterns: list[URLPattern] = [
    path("api/hosts", views.hosts, name="api-hosts"),
    path("api/connections", views.connections, name="api-connections"),
    path("api/connections/<str:conn_uuid>", views.connection_detail, name="api-connection"),
    path("api/connections/<str:conn_uuid>/lifecycle", views.lifecycle, name="api-lifecycle"),
    path("api/drops", views.drops, name="api-drops"),
    path("api/alerts", views.alerts, name="api-alerts"),
    path("api/loss", views.loss, name="api-loss"),
    path("api/schema", schema_view.schema, name="api-schema"),
    path("captures/upload/", upload.upload, name="capture-upload"),
]
