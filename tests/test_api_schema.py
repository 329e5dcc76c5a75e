"""/api/schema: a valid OpenAPI 3 document listing every /api/ URL of the URL conf."""

from __future__ import annotations

import pytest
from api_cast import get_json
from django.test import Client

from webapp.api.openapi import iter_api_urls

pytest_plugins = ["api_fixtures"]
pytestmark = pytest.mark.django_db


def test_every_api_url_in_the_url_conf_is_documented_in_the_schema(viewer_client: Client) -> None:
    schema = get_json(viewer_client, "/api/schema")
    urls = [path for path, _ in iter_api_urls()]
    assert len(urls) >= 9
    for path in urls:
        assert path in schema["paths"], f"{path} missing from /api/schema"
        assert not schema["paths"][path].get("x-undocumented"), (
            f"{path}: declare it with webapp.api.decorators.api_view or add it to openapi.OTHER_ENDPOINTS"
        )


def test_the_schema_is_openapi_3_with_the_declared_parameters(viewer_client: Client) -> None:
    schema = get_json(viewer_client, "/api/schema")
    assert schema["openapi"].startswith("3.")
    op = schema["paths"]["/api/connections"]["get"]
    names = [p["name"] for p in op["parameters"]]
    assert names == [
        "host",
        "comm",
        "pid",
        "uid",
        "port",
        "addr",
        "state",
        "has_anomaly",
        "since",
        "until",
        "cursor",
        "limit",
    ]
    port = next(p for p in op["parameters"] if p["name"] == "port")
    assert port["schema"] == {"type": "integer", "minimum": 0, "maximum": 65535}
    lifecycle = schema["paths"]["/api/connections/{conn_uuid}/lifecycle"]["get"]
    assert lifecycle["parameters"][0] == {
        "name": "conn_uuid", "in": "path", "required": True,
        "description": "the connection's UUID (records' conn_uuid)", "schema": {"type": "string"},
    }  # fmt: skip
    assert "post" in schema["paths"]["/api/ingest"]


def test_the_schema_needs_a_login(client: Client) -> None:
    assert client.get("/api/schema").status_code == 401


def test_every_read_api_url_answers_an_anonymous_caller_with_a_json_401(client: Client) -> None:
    checked = 0
    for path, view in iter_api_urls():
        if getattr(view, "api_spec", None) is None:
            continue  # other apps' endpoints: tests/test_webapp_security.py walks every URL
        answer = client.get(path.replace("{conn_uuid}", "00000000-0000-0000-0000-000000000000"))
        assert (answer.status_code, answer.json()) == (401, {"error": "login required"}), path
        checked += 1
    assert checked == 8
