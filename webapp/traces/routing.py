"""Websocket routes of the traces app (the live engineer adds `/ws/live/` here).

Mounted by webapp/asgi.py inside the origin check and auth middleware.
"""

from __future__ import annotations

from django.urls import URLPattern, path

from webapp.traces.consumers import LiveConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/live/", LiveConsumer.as_asgi()),
]
