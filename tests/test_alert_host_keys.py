"""An alert is its host's: the dashboard's alert views, acknowledgements and first/worst
history are keyed by (host_id, alert_id), so host A ingesting a record with host B's
alert_id (closed, worse numbers) neither hides, closes, acknowledges nor rewrites B's
alert (issue 33 item 3; webapp/dashboard/alert_versions.py).

Everything goes through the real ingest endpoint with each host's own token (the cast of
webapp_cast.py) and is read back through /api/dash/alerts as the viewer.
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments
from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from webapp_cast import Cast, cast, env, post  # noqa: F401 (cast is a fixture)

from translators import records as r

pytestmark = pytest.mark.postgres
SHARED = "alert-0f3c"  # host B's alert id, which host A's record reuses
T0 = 1_764_000_000.0  # a plausible wall clock (ingest refuses times before 2000)


def alert(host: str, seq: int, status: str, metric: float, count: int, message: str, **kw: Any) -> r.Alert:
    return r.Alert(
        **{**env(host, seq), "ts_wall": T0 + seq}, provider="nettrail", probe="alert", rule_id="K2",
        condition="retrans", alert_id=SHARED, severity=kw.pop("severity", "warning"), status=status,
        start=T0 + seq, count=count, metric=metric, message=message, **kw,
    )  # fmt: skip


def ingest(client: Client, token: str, records: list[r.Alert]) -> None:
    answer = post(client, token, records)
    assert answer.status_code == 200, answer.content
    assert answer.json()["stored"] == len(records)


@pytest.fixture
def collided(cast: Cast) -> Cast:
    """B's alert in two versions (2.0 %, then 5.0 %), then A's one record with B's id: closed, 9.0 %."""
    ingest(Client(), cast.token_b, [alert("host-b", 1, "open", 2.0, 1, "B fired")])
    ingest(Client(), cast.token_b, [alert("host-b", 2, "open", 5.0, 3, "B grew", severity="critical")])
    ingest(Client(), cast.token_a, [alert("host-a", 3, "closed", 9.0, 7, "A forged")])
    return cast


def viewer(cast: Cast) -> Client:
    client = Client()
    client.force_login(cast.viewer)
    return client


def listed(client: Client, **params: str) -> list[tuple[str, str, str]]:
    answer = client.get("/api/dash/alerts", params)
    assert answer.status_code == 200, answer.content
    return [(a["host_id"], a["message"], a["status"]) for a in answer.json()["alerts"]]


def test_another_hosts_record_with_the_same_alert_id_does_not_hide_or_close_it(collided: Cast) -> None:
    client = viewer(collided)
    assert listed(client) == [("host-a", "A forged", "closed"), ("host-b", "B grew", "open")]
    assert listed(client, host="host-b") == [("host-b", "B grew", "open")]
    assert listed(client, host="host-a") == [("host-a", "A forged", "closed")]
    assert listed(client, status="open") == [("host-b", "B grew", "open")]
    assert listed(client, status="closed") == [("host-a", "A forged", "closed")]
    overview = client.get("/api/dash/overview").json()["alerts"]
    assert sorted((a["host_id"], a["message"]) for a in overview) == [("host-a", "A forged"), ("host-b", "B grew")]


def test_first_and_worst_values_and_the_version_count_are_each_hosts_own(collided: Cast) -> None:
    rows = {a["host_id"]: a for a in viewer(collided).get("/api/dash/alerts").json()["alerts"]}
    b = rows["host-b"]
    assert (b["metric"], b["count"], b["versions"]) == (5.0, 3, 2)
    assert b["first"] == {"metric": 2.0, "count": 1, "message": "B fired", "ts": T0 + 1}
    assert b["worst"] == {"metric": 5.0, "count": 3, "message": "B grew", "ts": T0 + 2}  # not A's 9.0
    a = rows["host-a"]
    assert (a["metric"], a["count"], a["versions"]) == (9.0, 7, 1)
    own = {"metric": 9.0, "count": 7, "message": "A forged", "ts": T0 + 3}
    assert (a["first"], a["worst"]) == (own, own)  # its one version: nothing of B's


def test_an_acknowledgement_holds_for_its_hosts_alert_only(collided: Cast) -> None:
    client = viewer(collided)
    rows = {a["host_id"]: a for a in client.get("/api/dash/alerts").json()["alerts"]}
    acked = client.post(f"/api/dash/alerts/{rows['host-b']['id']}/ack")
    assert acked.status_code == 200, acked.content
    assert (acked.json()["host_id"], acked.json()["acked_by"], acked.json()["versions"]) == ("host-b", "viewer", 2)
    # a later version of B's alert keeps B's acknowledgement; A's record with the same id gets none
    ingest(Client(), collided.token_b, [alert("host-b", 4, "open", 4.0, 4, "B again")])
    ingest(Client(), collided.token_a, [alert("host-a", 5, "open", 1.0, 1, "A again")])
    after = {a["host_id"]: a for a in client.get("/api/dash/alerts").json()["alerts"]}
    assert (after["host-b"]["message"], after["host-b"]["acked_by"]) == ("B again", "viewer")
    assert (after["host-a"]["message"], after["host-a"]["acked_by"]) == ("A again", None)
    assert listed(client, acked="yes") == [("host-b", "B again", "open")]
    assert listed(client, acked="no") == [("host-a", "A again", "open")]
    assert listed(client, acked="yes", host="host-a") == []


def test_acknowledging_the_forged_record_does_not_acknowledge_the_real_alert(collided: Cast) -> None:
    client = viewer(collided)
    rows = {a["host_id"]: a for a in client.get("/api/dash/alerts").json()["alerts"]}
    assert client.post(f"/api/dash/alerts/{rows['host-a']['id']}/ack").status_code == 200
    assert listed(client, acked="yes") == [("host-a", "A forged", "closed")]
    assert listed(client, acked="no") == [("host-b", "B grew", "open")]
    after = {a["host_id"]: a["acked_by"] for a in client.get("/api/dash/alerts").json()["alerts"]}
    assert after == {"host-a": "viewer", "host-b": None}
