"""The OpenAPI 3 document served at /api/schema, built from the URL conf and the views' declarations.

Every URL under /api/ is listed: read-API views from their ``api_spec`` (summary,
query parameters, path parameters), other apps' endpoints from ``OTHER_ENDPOINTS``
below. A URL with neither is listed with ``x-undocumented: true``, and
tests/test_api_schema.py fails on it, so an endpoint cannot be added unseen.
Keep in sync with docs/api.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.urls import URLPattern, URLResolver, get_resolver

from translators.tracing_request import MAX_SKB_SAMPLE, PROVIDER_NAMES

API_PREFIX = "api/"
_CONVERTER = re.compile(r"<(?:(?P<conv>\w+):)?(?P<name>\w+)>")
ERROR = {"$ref": "#/components/schemas/Error"}

# The ingest answer (webapp/traces/ingest.py; tracing: translators/tracing_request.py).
INGEST_ANSWER = {
    "type": "object",
    "required": ["stored", "duplicates", "tracing"],
    "properties": {
        "stored": {"type": "integer"},
        "duplicates": {"type": "integer"},
        "queued": {"type": "boolean"},
        "tracing": {
            "type": "object",
            "nullable": True,
            "required": ["providers", "skb_sample"],
            "properties": {
                "providers": {"type": "array", "items": {"type": "string", "enum": list(PROVIDER_NAMES)}},
                "skb_sample": {"type": "integer", "nullable": True, "minimum": 1, "maximum": MAX_SKB_SAMPLE},
                "skb_window": {"type": "string", "pattern": r"^(0|[0-9.]+/[0-9.]+)$"},
            },
        },
    },
}

# Endpoints of other apps, described here from their contracts (docs/webapp.md).
OTHER_ENDPOINTS: dict[str, dict[str, Any]] = {
    "/api/ingest": {
        "post": {
            "summary": "Store a batch of records from a collector (bearer token of the host, not a login)",
            "tags": ["ingest"],
            "security": [{"ingestToken": []}],
            "requestBody": {
                "required": True,
                "content": {
                    "application/msgpack": {"schema": {"type": "array", "items": {"type": "object"}}},
                    "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
                },
            },
            "responses": {
                "200": {
                    "description": "{stored: N, duplicates: M, tracing: T}; T: what the dashboard asks the token's "
                    "host to trace, null or {providers: [...], skb_sample: N or null, skb_window: 'OPEN/EVERY' or '0' "
                    "(absent: the collector's own)}",
                    "content": {"application/json": {"schema": INGEST_ANSWER}},
                },
                "400": {"description": "record I: field: why", "content": {"application/json": {"schema": ERROR}}},
                "401": {"description": "missing or unknown token"},
                "403": {"description": "a record of another host"},
                "413": {"description": "body over NETTRAIL_INGEST_MAX_BYTES"},
            },
        }
    },
}


# Page-private JSON of the dashboard: listed, described by the view's docstring, not a contract.
INTERNAL_PREFIXES = ("/api/dash/",)


def _query(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "in": "query", "required": False, "schema": {"type": "string"}} for n in names]


def _path(name: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}


def _download(summary: str, parameters: list[dict[str, Any]]) -> dict[str, Any]:
    """The report app's streamed downloads (webapp/reports/views.py, docs/reports.md)."""
    errors = {code: {"description": why, "content": {"application/json": {"schema": ERROR}}} for code, why in (
        ("400", "bad filter or style"), ("401", "login required"), ("404", "unknown connection or host"),
        ("409", "nothing to export"))}  # fmt: skip
    return {"get": {"summary": summary, "tags": ["reports"], "parameters": parameters,
                    "responses": {"200": {"description": "the report, streamed"}, **errors}}}  # fmt: skip


OTHER_ENDPOINTS["/api/report"] = _download(
    "Stored records as a report in an xo style (format=json|xml|text|html or a --libxo string)",
    _query("host", "connection", "since", "until", "kind", "format"),
)
OTHER_ENDPOINTS["/api/connections/{conn_uuid}/export"] = _download(
    "One connection's records as a report, a pcap or a SIFTR log", [_path("conn_uuid"), *_query("format", "siftrver")]
)
OTHER_ENDPOINTS["/api/hosts/{name}/siftr"] = _download(
    "A host's SIFTR samples as a SIFTR log", [_path("name"), *_query("since", "until", "siftrver")]
)


def iter_api_urls() -> Iterator[tuple[str, Any]]:
    """(OpenAPI path, view) for every URL pattern under /api/ in the URL conf."""
    yield from _walk(get_resolver().url_patterns, "")


def _walk(patterns: list[Any], prefix: str) -> Iterator[tuple[str, Any]]:
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern) and route.startswith(API_PREFIX):
            yield "/" + _CONVERTER.sub(r"{\g<name>}", route.lstrip("^").rstrip("$")), pattern.callback


def _operation(path: str, view: Any) -> dict[str, Any]:
    spec = getattr(view, "api_spec", None)
    if spec is None:
        summary = (view.__doc__ or "").strip().split("\n")[0]
        if path.startswith(INTERNAL_PREFIXES):
            return {"summary": summary, "description": "internal to the dashboard pages", "x-internal": True}
        return {"summary": summary, "x-undocumented": True}
    parameters = [
        {"name": name, "in": "path", "required": True, "description": text, "schema": {"type": "string"}}
        for name, text in spec.path_params.items()
    ] + [p.openapi() for p in spec.params]
    responses: dict[str, Any] = {
        "200": {"description": spec.returns or "JSON"},
        "400": {"description": "a bad query parameter", "content": {"application/json": {"schema": ERROR}}},
        "401": {"description": "login required", "content": {"application/json": {"schema": ERROR}}},
    }
    if spec.path_params:
        responses["404"] = {"description": "no such object", "content": {"application/json": {"schema": ERROR}}}
    return {"get": {"summary": spec.summary, "tags": [spec.tag], "parameters": parameters, "responses": responses}}


def build_schema() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for path, view in iter_api_urls():
        paths[path] = OTHER_ENDPOINTS.get(path) or _operation(path, view)
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "nettrail API",
            "version": "1",
            "description": "Read API (session login) and collector ingest (bearer token). See docs/api.md.",
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": {
                "Error": {"type": "object", "required": ["error"], "properties": {"error": {"type": "string"}}},
            },
            "securitySchemes": {
                "session": {"type": "apiKey", "in": "cookie", "name": settings.SESSION_COOKIE_NAME},
                "ingestToken": {"type": "http", "scheme": "bearer"},
            },
        },
        "security": [{"session": []}],
    }
