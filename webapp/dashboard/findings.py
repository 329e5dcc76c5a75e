"""The findings of an uploaded capture's connection, for its dashboard page.

Captures (``nettrail analyze --store``, the upload page) store each connection's
summary with its findings (analysis/flows/findings.py): what went wrong, in plain
words, worst first. Live connections have none; the page then shows nothing extra.
Keep in sync with: templates/dashboard/_findings.html, translators/records_tcp.py (Finding).
"""

from __future__ import annotations

from typing import Any

from webapp.traces.models import KIND_MODELS


def findings_of(host: str, uuid: str) -> list[dict[str, Any]]:
    """The latest summary's findings of connection `uuid` on `host` (JSON objects as stored)."""
    summary = KIND_MODELS["connection"]
    found = (
        summary.objects.filter(host_id=host, conn_uuid=uuid, findings__isnull=False)
        .order_by("-ts_ns")
        .values_list("findings", flat=True)
        .first()
    )
    return list(found or [])
