"""Imported captures: `nettrail analyze FILE --store` and the /captures/upload/ page store under the capture's name."""

from __future__ import annotations

from pathlib import Path

import pytest
from api_cast import get_json
from capture_sample import write_capture
from django.test import Client, override_settings

from nettrail.cli import main
from webapp.traces.models import Connection, ConnectionSummary, Host

pytest_plugins = ["api_fixtures"]
pytestmark = pytest.mark.django_db


def test_analyze_store_keeps_the_connections_under_a_host_named_after_the_capture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = write_capture(tmp_path / "web.pcap")
    assert main(["analyze", str(capture), "--store", "--libxo", "json"]) == 0
    assert Host.objects.filter(name="web.pcap").count() == 1
    conns = Connection.objects.filter(host_id="web.pcap").order_by("sport")
    assert [(c.src, c.sport, c.dst, c.dport, c.proto) for c in conns] == [
        ("10.1.0.1", 40000, "10.1.0.2", 80, "tcp"),
        ("10.1.0.1", 40001, "10.1.0.2", 81, "tcp"),
    ]
    assert sorted(ConnectionSummary.objects.filter(host_id="web.pcap").values_list("conn_state", flat=True)) == [
        "REJ",
        "SF",
    ]
    first = capsys.readouterr().err
    assert "under host 'web.pcap'" in first
    assert main(["analyze", str(capture), "--store", "--libxo", "json"]) == 0
    assert "stored 0 records" in capsys.readouterr().err  # the same capture again: nothing twice
    assert ConnectionSummary.objects.filter(host_id="web.pcap").count() == 2


def test_analyze_server_without_a_token_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = write_capture(tmp_path / "x.pcap")
    assert main(["analyze", str(capture), "--server", "http://127.0.0.1:9", "--libxo", "json"]) == 2
    assert "--server needs --token" in capsys.readouterr().err


def test_the_upload_page_analyses_and_stores_an_uploaded_capture(viewer_client: Client, tmp_path: Path) -> None:
    page = viewer_client.get("/captures/upload/")
    assert page.status_code == 200 and b'name="csrfmiddlewaretoken"' in page.content
    capture = write_capture(tmp_path / "lab-upload.pcap")
    with capture.open("rb") as f:
        answer = viewer_client.post("/captures/upload/", {"capture": f})
    assert answer.status_code == 200
    assert b"under host\n      <strong>capture:lab-upload.pcap</strong>" in answer.content
    body = get_json(viewer_client, "/api/connections", host="capture:lab-upload.pcap")
    assert [c["dport"] for c in body["connections"]] == [81, 80]


@override_settings(NETTRAIL_UPLOAD_MAX_BYTES=200)
def test_an_upload_over_the_limit_is_refused_with_413(viewer_client: Client, tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "big.pcap")
    with capture.open("rb") as f:
        answer = viewer_client.post("/captures/upload/", {"capture": f})
    assert answer.status_code == 413
    assert b"larger than the 200 bytes" in answer.content
    assert not Host.objects.filter(name="big.pcap").exists()


def test_a_file_that_is_not_a_capture_is_a_400_naming_it(viewer_client: Client, tmp_path: Path) -> None:
    junk = tmp_path / "notes.pcap"
    junk.write_bytes(b"this is not a capture file at all" * 4)
    with junk.open("rb") as f:
        answer = viewer_client.post("/captures/upload/", {"capture": f})
    assert answer.status_code == 400
    assert b"notes.pcap: not a capture nettrail can read" in answer.content
    assert list(Host.objects.values_list("name", flat=True)) == []  # nothing left behind


def test_an_upload_named_like_a_live_host_never_writes_into_it(viewer_client: Client, tmp_path: Path) -> None:
    from webapp.traces.tokens import create_token

    create_token("vm")  # a live collector's host
    capture = write_capture(tmp_path / "vm")
    with capture.open("rb") as f:
        assert viewer_client.post("/captures/upload/", {"capture": f}).status_code == 200
    assert sorted(Host.objects.values_list("name", flat=True)) == ["capture:vm", "vm"]
    assert Connection.objects.filter(host_id="vm").count() == 0
    assert Connection.objects.filter(host_id="capture:vm").count() == 2


def test_no_token_can_be_made_for_a_capture_host_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["token", "create", "capture:vm"]) == 2
    assert "reserved for uploaded captures" in capsys.readouterr().err
    assert not Host.objects.filter(name="capture:vm").exists()


def test_the_upload_needs_a_login_and_a_csrf_token(client: Client, tmp_path: Path) -> None:
    assert client.get("/captures/upload/").status_code == 302
    csrf_client = Client(enforce_csrf_checks=True)
    from django.contrib.auth import get_user_model

    csrf_client.force_login(get_user_model().objects.create_user("u2", password="pw-not-used-1"))
    with write_capture(tmp_path / "c.pcap").open("rb") as f:
        assert csrf_client.post("/captures/upload/", {"capture": f}).status_code == 403
