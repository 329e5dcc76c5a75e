"""One capture uploaded under several names is that many hosts, each with its own alerts:
the K rules' alert ids name the host the capture is stored under
(analysis/capture/rule_records.stable), and the alert views key by (host, alert id), so
no upload's alerts hide another's (issue 33 item 3: 1 alert instead of 2 for three of four).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import Client

from tests.browser.capture_story import write_story_capture
from webapp.dashboard.tables import Alert

pytest_plugins = ["api_fixtures"]
pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
NAMES = ("one.pcap", "two.pcap", "three.pcap", "four.pcap")


def upload_as(client: Client, capture: Path, tmp_path: Path, name: str) -> None:
    copy = tmp_path / name
    copy.write_bytes(capture.read_bytes())
    with copy.open("rb") as f:
        answer = client.post("/captures/upload/", {"capture": f})
    assert answer.status_code == 303, answer.content
    assert "stored=329&duplicates=0" in answer["Location"]  # the same records, stored anew per name


def test_one_capture_uploaded_under_four_names_shows_its_alerts_under_each(
    viewer_client: Client, tmp_path: Path
) -> None:
    capture = write_story_capture(tmp_path / "story.pcap")
    for name in NAMES:
        upload_as(viewer_client, capture, tmp_path, name)
    ids = {}
    for name in NAMES:
        host = f"capture:{name}"
        alerts = viewer_client.get("/api/dash/alerts", {"host": host}).json()["alerts"]
        assert sorted((a["host_id"], a["rule_id"]) for a in alerts) == [
            (host, "K14"), (host, "K9"), (host, "P7"), (host, "P7")]  # fmt: skip
        page = viewer_client.get("/captures/", {"host": host})  # the capture's own page
        assert page.status_code == 200
        assert sorted(a["rule_id"] for a in page.context["result"]["alerts"]) == ["K14", "K9", "P7", "P7"]
        ids[name] = set(Alert.objects.filter(host_id=host, rule_id__startswith="K").values_list("alert_id", flat=True))
        assert len(ids[name]) == 2
    # each host names its K alerts apart from the others'
    assert len(set().union(*ids.values())) == 2 * len(NAMES)
    everything = viewer_client.get("/api/dash/alerts").json()["alerts"]
    assert sorted(a["rule_id"] for a in everything) == sorted(["K14", "K9", "P7", "P7"] * len(NAMES))
