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
    capture = write_capture(tmp_path / "lab.pcap")
    with capture.open("rb") as f:
        assert viewer_client.post("/captures/upload/", {"capture": f}).status_code == 303
    html = viewer_client.get("/captures/", {"host": "capture:lab.pcap"}).content.decode()
    table = html[html.index('id="capture-conns"') :]
    rows = {row.split('"', 1)[0]: row for row in table.split('<tr data-uuid="')[1:]}
    refused = Connection.objects.get(host_id="capture:lab.pcap", dport=81)
    clean = Connection.objects.get(host_id="capture:lab.pcap", dport=80)
    assert '<span class="badge sev-notice" title="refused: the responder answered the SYN' in rows[refused.conn_uuid]
    assert 'data-kind="refused">refused</span>' in rows[refused.conn_uuid]
    assert '<td class="findings">–</td>' in rows[clean.conn_uuid]
