"""An uploaded capture's connections keep their findings, and the connection page shows them.

The upload page stores the capture's records (webapp/traces/capture_store.py); the
connection summaries carry their findings (analysis/flows/findings.py), and the
connection page lists them in its Findings include (dashboard/_findings.html).
Keep in sync with: webapp/dashboard/findings.py, webapp/dashboard/views.py (connection).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from capture_sample import write_capture
from django.test import Client

from webapp.traces.models import Connection, ConnectionSummary

pytest_plugins = ["api_fixtures"]
pytestmark = pytest.mark.django_db


def test_the_connection_page_of_an_uploaded_capture_lists_its_findings(viewer_client: Client, tmp_path: Path) -> None:
    capture = write_capture(tmp_path / "lab.pcap")
    with capture.open("rb") as f:
        assert viewer_client.post("/captures/upload/", {"capture": f}).status_code == 303  # to the result page
    host = "capture:lab.pcap"
    stored = dict(ConnectionSummary.objects.filter(host_id=host).values_list("dport", "findings"))
    assert [(f["kind"], f["severity"], f["side"]) for f in stored[81]] == [("refused", "notice", "resp")]
    assert stored[80] == []
    refused = Connection.objects.get(host_id=host, dport=81)
    page = viewer_client.get(f"/connections/{refused.conn_uuid}/", {"host": host})
    assert page.status_code == 200
    html = page.content.decode()
    assert '<ul class="findings" id="findings" aria-labelledby="findings-h">' in html
    assert (
        '<li data-kind="refused" data-severity="notice"><span class="badge sev-notice">notice</span> '
        "refused: the responder answered the SYN with a reset (nothing listening, or a firewall)</li>"
    ) in html
    clean = Connection.objects.get(host_id=host, dport=80)
    page = viewer_client.get(f"/connections/{clean.conn_uuid}/", {"host": host})
    assert page.status_code == 200 and 'id="findings"' not in page.content.decode()


def test_the_capture_result_page_names_each_connections_findings(viewer_client: Client, tmp_path: Path) -> None:
    rows = result_rows(viewer_client, write_capture(tmp_path / "lab.pcap"))
    refused = Connection.objects.get(host_id="capture:lab.pcap", dport=81)
    clean = Connection.objects.get(host_id="capture:lab.pcap", dport=80)
    assert '<span class="badge sev-notice" title="refused: the responder answered the SYN' in rows[refused.conn_uuid]
    assert 'data-kind="refused">refused</span>' in rows[refused.conn_uuid]
    assert '<td class="findings">–</td>' in rows[clean.conn_uuid]


def test_a_connection_whose_opener_is_guessed_says_so(viewer_client: Client, tmp_path: Path) -> None:
    """A capture that begins mid-connection has no SYN: which end opened it is a guess
    (the higher port), and the result page marks that originator as guessed."""
    from scapy.all import IP, TCP, wrpcap

    c, s = IP(src="10.1.0.1", dst="10.1.0.2"), IP(src="10.1.0.2", dst="10.1.0.1")
    packets = [
        c / TCP(sport=40000, dport=80, flags="S", seq=100),  # this one is seen from its SYN
        s / TCP(sport=80, dport=40000, flags="SA", seq=500, ack=101),
        s / TCP(sport=80, dport=40002, flags="PA", seq=7000, ack=300) / (b"x" * 10),  # mid-stream
        c / TCP(sport=40002, dport=80, flags="A", seq=300, ack=7010),
    ]
    for i, p in enumerate(packets):
        p.time = 1_700_000_000 + i * 0.01
    wrpcap(str(tmp_path / "mid.pcap"), packets)
    rows = result_rows(viewer_client, tmp_path / "mid.pcap")
    mid = Connection.objects.get(host_id="capture:mid.pcap", sport=40002)
    seen = Connection.objects.get(host_id="capture:mid.pcap", sport=40000)
    assert '10.1.0.1:40002</a> <span class="muted guessed"' in rows[mid.conn_uuid]
    assert "guessed" not in rows[seen.conn_uuid]
    detail = viewer_client.get(f"/api/dash/connections/{mid.conn_uuid}", {"host": "capture:mid.pcap"}).json()
    assert detail["conn"]["direction_guessed"] is True  # the connection page says it beside the endpoint


def result_rows(client: Client, capture: Path) -> dict[str, str]:
    """Upload the capture; its result page's connection rows by uuid (their HTML)."""
    with capture.open("rb") as f:
        assert client.post("/captures/upload/", {"capture": f}).status_code == 303
    html = client.get("/captures/", {"host": f"capture:{capture.name}"}).content.decode()
    table = html[html.index('id="capture-conns"') :]
    return {row.split('"', 1)[0]: row for row in table.split('<tr data-uuid="')[1:]}
