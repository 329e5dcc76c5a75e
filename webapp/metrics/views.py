"""GET /metrics: Prometheus text exposition, for a logged-in user or any host's ingest token.

A scraper has no session, so a bearer ingest token (the one a collector already
has) is accepted too, and shows only its own host's counters; anything else gets 401
JSON like every API.
Keep in sync with: docs/reports.md ("Metrics"), webapp/traces/tokens.py.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from webapp.http import json_error
from webapp.metrics.exposition import REGISTRY, host_registry
from webapp.traces import tokens


@require_GET
@login_not_required
def metrics(request: HttpRequest) -> HttpResponseBase:
    if request.user.is_authenticated:
        return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)
    host = _token_host(request)
    if host is None:
        return json_error(401, "login or an ingest token required")
    return HttpResponse(generate_latest(host_registry(host)), content_type=CONTENT_TYPE_LATEST)


def _token_host(request: HttpRequest) -> str | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    row = tokens.authenticate(value.strip())
    return None if row is None else str(row.host.name)
