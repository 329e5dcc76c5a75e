"""Routes of the report/export downloads (included by webapp/urls.py as an optional app)."""

from __future__ import annotations

from django.urls import URLPattern, path

from webapp.reports import views

urlpatterns: list[URLPattern] = [
    path("api/report", views.report, name="report"),
    path("api/connections/<str:conn_uuid>/export", views.connection_export, name="connection-export"),
    path("api/hosts/<str:name>/siftr", views.host_siftr, name="host-siftr"),
]
