"""HTTP routes of the traces app: the collectors' ingest endpoint."""

from __future__ import annotations

from django.urls import URLPattern, path

from webapp.traces import ingest

urlpatterns: list[URLPattern] = [
    path("api/ingest", ingest.ingest, name="ingest"),
]
