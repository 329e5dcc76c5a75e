"""Repeated emissions of one alert (same alert_id: opened, fired again, escalated,
closed) are one alert: the Connection row counts it once and the dashboard's alert
views show its newest version; an acknowledgement holds for every version."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from translators.records import Alert, TcpStateChange, connection_uuid
from webapp.traces.models import Connection
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db
HOST, BOOT = "web1", "boot-1"
UUID = connection_uuid(HOST, BOOT, 7)


def version(seq: int, status: str, count: int, severity: str = "warning", alert_id: str = "a-1") -> Alert:
    return Alert(
        host_id=HOST, boot_id=BOOT, seq=(1 << 62) + seq, ts_ns=seq, ts_wall=1000.0 + seq, provider="nettrail",
        probe="alert", conn_uuid=UUID, rule_id="K1", alert_id=alert_id, severity=severity, status=status,
        start=1000.0, end=1000.0 + seq, count=count, message=f"version {seq}",
    )  # fmt: skip


def state(seq: int) -> TcpStateChange:
    return TcpStateChange(
        host_id=HOST, boot_id=BOOT, seq=seq, ts_ns=seq, ts_wall=1000.0 + seq, provider="tcp", probe="state-change",
        conn_uuid=UUID, src="10.0.0.1", sport=40000, dst="10.0.0.2", dport=443, prev_state="SYN_SENT",
        state="ESTABLISHED",
    )  # fmt: skip


@pytest.fixture()
def client() -> Client:
    c = Client()
    c.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    return c


def test_a_connection_counts_an_alert_once_however_often_it_is_emitted() -> None:
    store_batch([state(1), version(1, "open", 1), version(2, "open", 2)])  # two versions in one batch
    store_batch([version(3, "open", 3, "critical")])  # and later ones in later batches
    store_batch([version(4, "closed", 3, "critical"), version(5, "open", 1, alert_id="a-2")])
    conn = Connection.objects.get(conn_uuid=UUID)
    assert (conn.alerts, conn.anomaly) == (2, True)


def test_the_dashboard_shows_the_newest_version_of_each_alert(client: Client) -> None:
    store_batch([state(1), version(1, "open", 1), version(2, "open", 2), version(3, "closed", 2, "critical")])
    store_batch([version(4, "open", 1, alert_id="a-2")])
    listed = client.get("/api/dash/alerts").json()["alerts"]
    assert [(a["message"], a["status"], a["severity"], a["count"]) for a in listed] == [
        ("version 4", "open", "warning", 1), ("version 3", "closed", "critical", 2)]  # fmt: skip
    assert [a["message"] for a in client.get("/api/dash/alerts", {"status": "open"}).json()["alerts"]] == ["version 4"]
    overview = client.get("/api/dash/overview").json()["alerts"]
    assert sorted(a["message"] for a in overview) == ["version 3", "version 4"]
    detail = client.get(f"/api/dash/connections/{UUID}").json()["alerts"]
    assert sorted((a["message"], a["status"]) for a in detail) == [("version 3", "closed"), ("version 4", "open")]


def test_an_acknowledgement_holds_for_the_versions_that_follow(client: Client) -> None:
    store_batch([version(1, "open", 1)])
    [first] = client.get("/api/dash/alerts").json()["alerts"]
    assert client.post(f"/api/dash/alerts/{first['id']}/ack").status_code == 200
    store_batch([version(2, "open", 2)])
    [newest] = client.get("/api/dash/alerts").json()["alerts"]
    assert (newest["message"], newest["acked_by"]) == ("version 2", "viewer")
    assert [a["message"] for a in client.get("/api/dash/alerts", {"acked": "yes"}).json()["alerts"]] == ["version 2"]
    assert client.get("/api/dash/alerts", {"acked": "no"}).json()["alerts"] == []
