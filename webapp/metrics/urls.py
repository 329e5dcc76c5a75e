"""Route of /metrics (included by webapp/urls.py as an optional app)."""

from __future__ import annotations

from django.urls import URLPattern, path

from webapp.metrics import views

urlpatterns: list[URLPattern] = [path("metrics", views.metrics, name="metrics")]
