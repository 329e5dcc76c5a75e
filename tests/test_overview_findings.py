"""The Overview lists open findings by severity, then recency (issue 34 item 1).

Ten newest notices of a flood used to hide the warning behind them. Stored through the
real ingest store (store_batch) and read through the real API; each finding is its
newest version per (host, alert_id)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from translators.records import Alert
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db
BOOT = "boot-1"


def finding(seq: int, alert_id: str, severity: str, status: str = "open", host: str = "web1", **kw: object) -> Alert:
    return Alert(
        host_id=host, boot_id=BOOT, seq=(1 << 62) + seq, ts_ns=seq, ts_wall=1000.0 + seq, provider="nettrail",
        probe="alert", rule_id="K10", alert_id=alert_id, severity=severity, status=status, start=1000.0,
        end=1000.0 + seq, message=f"{alert_id} v{seq}", **kw,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.fixture()
def client() -> Client:
    c = Client()
    c.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    return c


def test_open_findings_come_first_by_severity_then_recency_and_closed_ones_after(client: Client) -> None:
    store_batch([
        finding(1, "crit-then-closed", "critical"),
        finding(2, "old-warning", "warning"),
        finding(3, "leak", "notice", members=81, member_conn_uuids=["c1"]),
        finding(4, "new-warning", "warning"),
        finding(5, "crit-then-closed", "critical", status="closed"),
        finding(6, "notice-a", "notice"),
        finding(7, "leak", "warning", members=200, member_conn_uuids=["c1", "c2"]),  # the leak grew: escalated
        finding(8, "critical", "critical", host="web2"),
    ])  # fmt: skip
    rows = client.get("/api/dash/overview").json()["alerts"]
    assert [(r["message"], r["severity"], r["status"], r["members"]) for r in rows] == [
        ("critical v8", "critical", "open", None),
        ("leak v7", "warning", "open", 200),  # its newest version only: 200 sockets, not 81
        ("new-warning v4", "warning", "open", None),
        ("old-warning v2", "warning", "open", None),
        ("notice-a v6", "notice", "open", None),
        ("crit-then-closed v5", "critical", "closed", None),
    ]


def test_the_alerts_page_gets_a_findings_members_to_link_each_socket(client: Client) -> None:
    conns = [f"conn-{i}" for i in range(50)]
    store_batch([finding(1, "leak", "warning", members=200, member_conn_uuids=conns)])
    [row] = client.get("/api/dash/alerts").json()["alerts"]
    assert (row["members"], row["member_conn_uuids"]) == (200, conns)
