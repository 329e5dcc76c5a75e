"""The dashboard's downloads are the report documents: every style fetched from the
connection page's links and from the dashboard's old export URL validates against
docs/schema/ and equals /api/report for that connection (one exporter, issue 14)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from django.contrib.auth import get_user_model
from django.http import StreamingHttpResponse
from django.test import Client
from report_cast import CONN_A, store_cast
from report_schemas import validate_json, validate_xml

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
STYLES = ("json", "xml", "text", "html")
EXPORT = f"/api/connections/{CONN_A}/export"


@pytest.fixture
def viewer(db: None) -> Client:
    store_cast()
    client = Client()
    client.force_login(get_user_model().objects.create_user("viewer"))
    return client


def body(resp: StreamingHttpResponse) -> str:
    assert resp.status_code == 200 and isinstance(resp, StreamingHttpResponse)
    return b"".join(resp.streaming_content).decode()  # type: ignore[arg-type]


def undated(text: str) -> str:
    """The document without the header's generated-at time, the one value two requests differ in."""
    # epoch seconds in the encoding styles, ISO 8601 UTC in the text style (docs/output.md)
    out, n = re.subn(r"(generated\D*)(\d+\.\d{6}|\d{4}-\d\d-\d\dT[\d:.]+Z)", r"\1<time>", text, count=1)
    assert n == 1
    return out


def test_the_connection_page_links_every_download_to_the_report_exporter(viewer: Client) -> None:
    page = viewer.get(f"/connections/{CONN_A}/").content.decode()
    links = re.findall(r'<a href="([^"]+)" download data-format="([^"]+)"', page)
    formats = ("json", "xml", "text", "html", "siftr", "zeek")
    # a connection is its host's: every link names it (host isolation, issue 15)
    assert links == [(f"{EXPORT}?format={f}&amp;host=alpha", f) for f in formats]
    # a live connection has no packet bytes: the pcap button is disabled and the page says why
    # (the endpoint would answer 409; a download would save a file holding that error)
    assert '<button type="button" disabled data-format="pcap"' in page
    assert "pcap: No packets to download: a live connection is traced in the kernel" in page
    assert viewer.get(EXPORT, {"format": "pcap", "host": "alpha"}).status_code == 409


@pytest.mark.parametrize("style", STYLES)
def test_the_old_dashboard_export_url_redirects_to_the_report_export(viewer: Client, style: str) -> None:
    resp = viewer.get(f"/api/dash/connections/{CONN_A}/export", {"format": style})
    assert resp.status_code == 301 and resp["Location"] == f"{EXPORT}?format={style}"


@pytest.mark.parametrize("style", STYLES)
def test_each_dashboard_download_is_the_report_of_that_connection(viewer: Client, style: str) -> None:
    download = body(viewer.get(f"/api/dash/connections/{CONN_A}/export", {"format": style}, follow=True))
    report = body(viewer.get("/api/report", {"connection": CONN_A, "format": style}))
    assert undated(download) == undated(report)


def test_the_json_download_validates_against_the_report_schema(viewer: Client) -> None:
    doc = json.loads(body(viewer.get(f"/api/dash/connections/{CONN_A}/export", {"format": "json"}, follow=True)))
    validate_json(doc)
    assert [c["conn_uuid"] for c in doc["nettrail_report"]["connection"]] == [CONN_A]
    assert [s["snd_cwnd"] for s in doc["nettrail_report"]["connection"][0]["siftr_sample"]] == [14480, 28960, 43440]


def test_the_xml_download_validates_against_the_report_xsd(viewer: Client) -> None:
    text = body(viewer.get(f"/api/dash/connections/{CONN_A}/export", {"format": "xml"}, follow=True))
    validate_xml(text)
    root = ET.fromstring(text)
    assert [c.findtext("conn-uuid") for c in root.findall("connection")] == [CONN_A]


def test_an_unknown_style_is_a_json_error_after_the_redirect(viewer: Client) -> None:
    resp = viewer.get(f"/api/dash/connections/{CONN_A}/export", {"format": "pdf"}, follow=True)
    assert resp.status_code == 400 and resp["Content-Type"] == "application/json"
    assert resp.json()["error"]


def test_the_old_url_still_needs_a_login(db: None) -> None:
    resp = Client().get(f"/api/dash/connections/{CONN_A}/export")
    assert resp.status_code == 401 and resp.json() == {"error": "login required"}
