"""The read API app (`/api/...` JSON for programs, `/captures/upload/`); see docs/api.md."""

from __future__ import annotations

from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "webapp.api"
    label = "api"
    verbose_name = "nettrail read API"
