"""Report/export downloads: login, streamed bodies in each style, exact errors (400/404/409)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest
from django.contrib.auth import get_user_model
from django.http import StreamingHttpResponse
from django.test import AsyncClient, Client
from report_cast import CONN_A, CONN_B, CONN_C, sample, store_cast
from report_schemas import validate_json, validate_xml

from translators.siftr_log import read_log
from webapp.traces.store import store_batch

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def viewer(db: None) -> Client:
    store_cast()
    client = Client()
    client.force_login(get_user_model().objects.create_user("viewer"))
    return client


def body(resp: StreamingHttpResponse) -> str:
    assert isinstance(resp, StreamingHttpResponse)
    return b"".join(resp.streaming_content).decode()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    ["/api/report", f"/api/connections/{CONN_A}/export?format=siftr", "/api/hosts/alpha/siftr"],
)
def test_every_download_needs_a_login(db: None, url: str) -> None:
    resp = Client().get(url)
    assert resp.status_code == 401 and resp.json() == {"error": "login required"}


def test_the_json_report_streams_and_validates(viewer: Client) -> None:
    resp = viewer.get("/api/report", {"host": "alpha", "format": "json"})
    assert resp.status_code == 200 and resp["Content-Type"] == "application/json; charset=utf-8"
    assert resp["Content-Disposition"] == 'attachment; filename="nettrail-report.json"'
    doc = json.loads(body(resp))
    validate_json(doc)
    assert [c["conn_uuid"] for c in doc["nettrail_report"]["connection"]] == [CONN_A, CONN_B]


def test_the_xml_export_of_a_connection_validates(viewer: Client) -> None:
    resp = viewer.get(f"/api/connections/{CONN_C}/export", {"format": "xml,pretty"})
    assert resp.status_code == 200 and resp["Content-Type"] == "application/xml; charset=utf-8"
    text = body(resp)
    validate_xml(text)
    assert f"<conn-uuid>{CONN_C}</conn-uuid>" in text and "<drop-reason-str>TCP_CSUM</drop-reason-str>" in text


def test_text_and_html_exports(viewer: Client) -> None:
    text = body(viewer.get(f"/api/connections/{CONN_B}/export", {"format": "text"}))
    assert sum(line.startswith("1970-01-01T") and " siftr " in line for line in text.splitlines()) == 2
    html = body(viewer.get(f"/api/connections/{CONN_B}/export", {"format": "html"}))
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert html.count('<div class="title">siftr_sample') == 2


def test_the_siftr_downloads_parse_back(viewer: Client, tmp_path: Path) -> None:
    resp = viewer.get(f"/api/connections/{CONN_A}/export", {"format": "siftr", "siftrver": "1.2.3"})
    assert resp.status_code == 200 and resp["Content-Disposition"] == f'attachment; filename="{CONN_A}.siftr"'
    path = tmp_path / "a.siftr"
    path.write_text(body(resp))
    assert [s.snd_cwnd for s in read_log(path, host_id="h", boot_id="b").samples] == [14480, 28960, 43440]
    path.write_text(body(viewer.get("/api/hosts/alpha/siftr", {"since": "1004"})))
    log = read_log(path, host_id="h", boot_id="b")
    assert [s.snd_cwnd for s in log.samples] == [28960, 43440, 14480, 14480]
    assert log.header.enable_time == 1004.0


@pytest.mark.parametrize(
    ("url", "status", "error"),
    [
        ("/api/connections/6f2d7a1e-0000-4c1e-9f51-000000000000/export", 404, "unknown connection 6f2d7a1e-0000-4c1e-9f51-000000000000"),
        ("/api/connections/nope/export", 400, "bad connection id 'nope': expected a UUID"),
        ("/api/hosts/gamma/siftr", 404, "unknown host gamma"),
        ("/api/report?since=2000&until=1000", 400, "inverted time range: since (2000) is after until (1000)"),
        ("/api/report?format=yaml", 400, None),
        ("/api/report?kind=nothing", 400, None),
        ("/api/hosts/alpha/siftr?siftrver=9", 400, "unknown siftrver '9'; known: 1.2.3, 1.3.0, 2.0, 2.2"),
        (f"/api/connections/{CONN_C}/export?format=siftr", 409, "no SIFTR samples in scope"),
        (f"/api/connections/{CONN_A}/export?format=pcap", 409, "no packet record with frame bytes in scope (import captures with --keep-bytes)"),
    ],
)  # fmt: skip
def test_bad_requests_get_a_json_error(viewer: Client, url: str, status: int, error: str | None) -> None:
    resp = viewer.get(url)
    assert resp.status_code == status
    assert resp["Content-Type"] == "application/json"
    if error is not None:
        assert resp.json() == {"error": error}
    else:
        assert resp.json()["error"]


def test_a_connection_with_polled_samples_only_has_no_siftr_log_and_is_told_why(viewer: Client) -> None:
    polled = msgspec.structs.replace(sample("beta", 3, CONN_C, 14480), direction="poll")
    store_batch([polled])
    resp = viewer.get(f"/api/connections/{CONN_C}/export", {"format": "siftr"})
    assert resp.status_code == 409
    assert resp.json()["error"].startswith("no SIFTR samples of packets in scope: those here were polled (siftr-poll)")


def test_only_get_is_allowed(viewer: Client) -> None:
    assert viewer.post("/api/report").status_code == 405


@pytest.mark.django_db(transaction=True)
async def test_under_asgi_the_body_is_an_async_stream(transactional_db: None) -> None:
    from asgiref.sync import sync_to_async

    def setup() -> object:
        from django.db import connections

        store_cast()
        user = get_user_model().objects.create_user("viewer")
        connections.close_all()  # this worker thread's connection would outlive the test database
        return user

    user = await sync_to_async(setup)()
    client = AsyncClient()
    await client.aforce_login(user)
    resp = await client.get("/api/report", {"format": "json", "connection": CONN_B})
    assert resp.status_code == 200 and resp.is_async
    chunks = [chunk async for chunk in resp.streaming_content]
    doc = json.loads(b"".join(chunks))
    assert [c["conn_uuid"] for c in doc["nettrail_report"]["connection"]] == [CONN_B]
    from django.db import connections

    await sync_to_async(connections.close_all)()  # the request thread's connection (PostgreSQL teardown)
