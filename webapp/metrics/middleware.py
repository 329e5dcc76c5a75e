"""Times POST /api/ingest for the latency histogram (listed in settings.MIDDLEWARE).

A middleware, so the ingest view stays unaware of metrics; it sits outermost so the
time includes authentication, decoding and the database transaction.
Keep in sync with: webapp/metrics/exposition.py (INGEST_LATENCY).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from webapp.metrics.exposition import INGEST_LATENCY

INGEST_PATH = "/api/ingest"


class IngestTimingMiddleware:
    """Sync and async capable, so it never forces a thread hop on the ASGI stack."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self.is_async:
            return self._acall(request)
        if not _timed(request):
            return self.get_response(request)
        start = time.perf_counter()
        response = self.get_response(request)
        _observe(response, start)
        return response

    async def _acall(self, request: HttpRequest) -> Any:
        if not _timed(request):
            return await self.get_response(request)
        start = time.perf_counter()
        response = await self.get_response(request)
        _observe(response, start)
        return response


def _timed(request: HttpRequest) -> bool:
    return bool(request.path == INGEST_PATH and request.method == "POST")


def _observe(response: HttpResponseBase, start: float) -> None:
    outcome = "stored" if response.status_code == 200 else "rejected"
    INGEST_LATENCY.labels(outcome).observe(time.perf_counter() - start)
