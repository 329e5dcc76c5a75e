"""A captured connection, stored by `nettrail analyze --store --keep-bytes`, exported as pcap
again (CLI and endpoint): tshark sees the same frames and flow as in the original capture."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from loopback_capture import capture_connections, need_tools, tshark_conversations

from nettrail.cli import main
from webapp.traces.models import Connection, IpPacket, TcpSegment

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
SCHEMA_DIR = Path(__file__).resolve().parents[1] / "docs" / "schema"


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need_tools()
    path = tmp_path_factory.mktemp("stored") / "lo.pcap"
    capture_connections(path, [2000, 12000])
    return path


def store_capture(path: Path) -> None:
    assert main(["analyze", str(path), "--store", "--keep-bytes"]) == 0


def second_connection() -> Connection:
    return Connection.objects.order_by("first_seen")[1]


def test_the_exported_connection_has_the_captured_frames_and_flow(capture: Path, tmp_path: Path, db: None) -> None:
    store_capture(capture)
    conn = second_connection()
    original = tshark_conversations(capture)
    assert len(original) == 2
    stored = TcpSegment.objects.filter(conn_uuid=conn.conn_uuid)
    assert stored.count() == stored.filter(frame_bytes__isnull=False).count() > 0
    assert IpPacket.objects.filter(conn_uuid=conn.conn_uuid).count() == stored.count()  # one frame, two records
    out = tmp_path / "conn.pcap"
    assert main(["report", "--connection", conn.conn_uuid, "--pcap", "-o", str(out)]) == 0
    ((ends, frames),) = tshark_conversations(out).items()
    assert ends[1] == f"127.0.0.1:{conn.dport}" or ends[0] == f"127.0.0.1:{conn.dport}"
    assert frames == original[ends] == stored.count()
    report = tmp_path / "conn.json"
    assert main(["report", "--connection", conn.conn_uuid, "--libxo", "json", "-o", str(report)]) == 0
    doc = json.loads(report.read_text())
    jsonschema.validate(doc, json.loads((SCHEMA_DIR / "report.schema.json").read_text()))
    (listed,) = doc["nettrail_report"]["connection"]
    (summary,) = listed["summary"]  # the capture's Connection record, listed as `summary`
    assert summary["kind"] == "connection" and summary["packets_orig"] + summary["packets_resp"] == frames
    assert len(listed["tcp_segment"]) == len(listed["ip_packet"]) == frames
    assert all(seg["frame_bytes"] is None for seg in listed["tcp_segment"])  # bytes only go to pcap


def test_the_pcap_download_streams_the_same_frames(capture: Path, tmp_path: Path, db: None) -> None:
    store_capture(capture)
    conn = second_connection()
    client = Client()
    url = f"/api/connections/{conn.conn_uuid}/export?format=pcap"
    assert client.get(url).status_code == 401
    client.force_login(get_user_model().objects.create_user("viewer"))
    resp = client.get(url)
    assert resp.status_code == 200 and resp["Content-Type"] == "application/vnd.tcpdump.pcap"
    out = tmp_path / "download.pcap"
    out.write_bytes(b"".join(resp.streaming_content))
    ((ends, frames),) = tshark_conversations(out).items()
    assert frames == tshark_conversations(capture)[ends]
    whole = client.get("/api/report", {"format": "pcap", "host": capture.name})  # a filter, not one connection
    assert whole.status_code == 200
    out.write_bytes(b"".join(whole.streaming_content))
    assert tshark_conversations(out) == tshark_conversations(capture)
