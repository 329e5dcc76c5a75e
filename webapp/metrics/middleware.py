"""Times POST /api/ingest for the latency histogram (listed in settings.MIDDLEWARE).

A middleware, so the ingest view stays unaware of metrics; it sits outermost so the
time includes authentication, decoding and the database transaction.
Keep in sync with: webapp/metrics/exposition.py (INGEST_LATENCY).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponseBase

from webapp.metrics.exposition import INGEST_LATENCY

INGEST_PATH = "/api/ingest"


class IngestTimingMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        if request.path != INGEST_PATH or request.method != "POST":
            return self.get_response(request)
        start = time.perf_counter()
        response = self.get_response(request)
        outcome = "stored" if response.status_code == 200 else "rejected"
        INGEST_LATENCY.labels(outcome).observe(time.perf_counter() - start)
        return response
