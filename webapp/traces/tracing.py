"""A host's tracing request: what the dashboard asks its collector to trace.

Stored on the Host row, set by staff (webapp/dashboard/tracing.py), answered with every
ingest of that host's token (webapp/traces/ingest.py), never another host's. The wire
form and its checks are translators/tracing_request.py's, shared with the collector.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from translators.tracing_request import TracingRequest, check, to_answer
from webapp.traces.models import Host


def request_of(host: Host) -> TracingRequest | None:
    """The host's request, or None (its collector's own choice)."""
    providers = tuple(p for p in host.tracing_providers.split(",") if p)
    if not providers:
        return None
    try:
        return check(TracingRequest(providers, host.tracing_skb_sample, host.tracing_skb_window or None))
    except ValueError:
        return None  # a row edited by hand to nonsense asks for nothing


def answer_of(host: Host) -> dict[str, Any] | None:
    return to_answer(request_of(host))


def set_request(host: Host, request: TracingRequest | None, user: str) -> None:
    """Store (checked) or clear the host's request, saying who did it and when."""
    if request is not None:
        request = check(request)
    host.tracing_providers = ",".join(request.providers) if request is not None else ""
    host.tracing_skb_sample = request.skb_sample if request is not None else None
    host.tracing_skb_window = (request.skb_window or "") if request is not None else ""
    host.tracing_set_by = user
    host.tracing_set_at = timezone.now()
    fields = ["tracing_providers", "tracing_skb_sample", "tracing_skb_window", "tracing_set_by", "tracing_set_at"]
    host.save(update_fields=fields)
