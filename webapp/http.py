"""The one way the webapp answers with a JSON error.

Every API error body is ``{"error": "<short message>"}`` plus optional extra keys
(the ingest contract adds ``index`` and ``field``). Keep in sync with docs/webapp.md.
"""

from __future__ import annotations

from typing import Any

from django.http import JsonResponse


def json_error(status: int, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)
