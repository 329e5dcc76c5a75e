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
    # stored: a redirect to the capture's result on the Captures page
    assert answer.status_code == 303
    # 22 records and the P7 alert of the refused connect's finding
    assert answer["Location"] == "/captures/?host=capture%3Alab-upload.pcap&stored=23&duplicates=0"
    result = viewer_client.get(answer["Location"])
    assert b"under host <strong>capture:lab-upload.pcap</strong>" in result.content
    assert b'<td class="conn-state">REJ</td><td class="history">Sr</td>' in result.content
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
        assert viewer_client.post("/captures/upload/", {"capture": f}).status_code == 303
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


def test_the_same_capture_uploaded_twice_stores_nothing_twice_alerts_included(
    viewer_client: Client, tmp_path: Path
) -> None:
    """The K rules' alerts (numbered and named by the engine from the clock) are renumbered
    after the capture's records and named from what they are about (rule_records.stable)."""
    from tests.browser.capture_story import write_story_capture
    from webapp.dashboard.tables import Alert

    capture = write_story_capture(tmp_path / "twice.pcap")
    answers = []
    for _ in range(2):
        with capture.open("rb") as f:
            answers.append(viewer_client.post("/captures/upload/", {"capture": f}))
    first, second = (a["Location"] for a in answers)
    assert "stored=329&duplicates=0" in first  # 327 records + 2 P7 alerts (findings)
    assert "stored=0&duplicates=329" in second
    rules = sorted(Alert.objects.filter(host_id="capture:twice.pcap").values_list("rule_id", flat=True))
    assert rules == ["K14", "K9", "P7", "P7"]  # P7: the refused and the reset findings
