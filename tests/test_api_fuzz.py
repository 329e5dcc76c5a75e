"""Fuzz every API operation of /api/schema with schemathesis: no 5xx and no answer that
claims or should be JSON and is not strict JSON (no NaN or Infinity), over a few
thousand generated requests (at least REQUESTS, counted, every operation called),
valid and invalid (schemathesis' positive and negative modes), as a logged-in user
with a host's ingest token. Then the dashboard pages with random values of their
query parameters: no 5xx.

In process, through Django's WSGI handler (the whole middleware stack, the test
database): a daphne on this 2-core machine answers ~5 fuzz requests a second, too few
for thousands in a test. The ASGI/daphne layers are tested in tests/test_refuse_early.py.
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import hypothesis
import pytest
import requests
import schemathesis
from django.core.wsgi import get_wsgi_application
from django.test import Client
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode
from webapp_cast import Cast, cast, post, retransmit, state  # noqa: F401 (cast is a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.django_db]
WSGI = get_wsgi_application()
# Per operation and mode; an operation without parameters has one possible request
# (hypothesis stops there), so the total is counted and asserted: at least REQUESTS.
EXAMPLES = 130
REQUESTS = 3000
# Streamed downloads whose 200 is a report, pcap or log in the asked format, not JSON.
DOWNLOADS = ("/api/report", "/api/connections/{conn_uuid}/export", "/api/hosts/{name}/siftr")
PAGES = (
    "/",
    "/connections/",
    "/buffers/",
    "/udp/",
    "/counters/",
    "/alerts/",
    "/status/",
    "/status/tracing/",
    "/captures/upload/",
)
PAGE_PARAMS = ("host", "reason", "conn", "skb", "sort", "severity", "rule", "acked", "q", "cursor", "limit")


@pytest.fixture
def logged_in(cast: Cast) -> Client:
    """A viewer's session, with one connection's records ingested by host A."""
    assert post(Client(), cast.token_a, [state("host-a", 1, "CLOSED", "SYN_SENT"), retransmit("host-a", 2)]).json() == {
        "stored": 2,
        "duplicates": 0,
        "tracing": None,
    }
    client = Client()
    client.force_login(cast.viewer)
    return client


def strict_json(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_no_generated_api_request_gets_a_5xx_or_an_answer_that_is_not_json(cast: Cast, logged_in: Client) -> None:
    schema = schemathesis.openapi.from_dict(logged_in.get("/api/schema").json())
    headers = {"Authorization": f"Bearer {cast.token_a}"}
    # Explicit, so a value schemathesis generates for the schema's session cookie cannot replace it.
    cookies = {"sessionid": logged_in.cookies["sessionid"].value}
    failures: list[str] = []
    count = 0
    called: Counter[str] = Counter()
    operations = [result.ok() for result in schema.get_all_operations()]

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
            @hypothesis.settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            def call(case: Any) -> None:
                nonlocal count
                try:
                    resp = case.call(app=WSGI, headers=headers, cookies=cookies)
                except (schemathesis.errors.SerializationNotPossible, requests.exceptions.InvalidHeader):
                    return  # a body or header the client cannot even send (e.g. msgpack, a newline)
                count += 1
                called[case.operation.label] += 1
                problem = _problem(case.operation.path, resp)
                if problem:
                    failures.append(f"{case.method} {case.formatted_path} {case.query}: {resp.status_code} {problem}")

            call()
    assert failures == [], "\n".join(failures[:20])
    assert sorted(called) == sorted(op.label for op in operations)  # every operation of /api/schema
    assert count >= REQUESTS, called


# Values random generation rarely reaches: past 64 bits, past the largest float, NaN.
BOUNDARY = {"integer": ("99999999999999999999999", "-99999999999999999999999"), "number": ("1e999", "nan", "-inf")}


def test_every_numeric_query_parameter_refuses_values_past_its_column_with_400(logged_in: Client) -> None:
    schema = logged_in.get("/api/schema").json()
    tried = []
    for path, methods in schema["paths"].items():
        for spec in (m for m in methods.values() if isinstance(m, dict)):  # internal paths: no operations
            for param in spec.get("parameters", []):
                for value in BOUNDARY.get(param["schema"]["type"], ()) if param["in"] == "query" else ():
                    url = path.replace("{conn_uuid}", "00000000-0000-0000-0000-000000000001").replace(
                        "{name}", "host-a"
                    )
                    resp = logged_in.get(url, {param["name"]: value})
                    tried.append((url, param["name"], value, resp.status_code))
    assert [t for t in tried if t[3] != 400] == []
    assert len(tried) >= 20  # pid, uid, port, limit, since, until... of several operations


def _problem(path: str, resp: Any) -> str | None:
    """What is wrong with an answer (a schemathesis Response: lower-case header names, list values)."""
    if resp.status_code >= 500:
        return resp.text[:300]
    content_type = (resp.headers.get("content-type") or [""])[0]
    is_json = content_type.startswith("application/json")
    if not is_json and (resp.status_code >= 400 or path not in DOWNLOADS):
        return f"answered {content_type!r}, not JSON"
    if is_json:
        try:
            strict_json(resp.text)
        except ValueError as exc:
            return f"not JSON: {exc}"
    return None


def test_no_page_answers_a_5xx_whatever_its_query(logged_in: Client) -> None:
    @hypothesis.settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @hypothesis.given(
        page=st.sampled_from(PAGES),
        params=st.dictionaries(st.sampled_from(PAGE_PARAMS), st.text(max_size=300), max_size=4),
    )
    def visit(page: str, params: dict[str, str]) -> None:
        resp = logged_in.get(page, params)
        assert resp.status_code < 500, (page, params)

    visit()
