"""The status page's JSON view (/api/dash/status) and a connection's sampling windows
(/api/dash/connections/<uuid>): login, the newest collector_status with its attach
coverage, the CPU series and the H4 budget, sampling, losses and self-health alerts.
Records: tests/selfhealth_cast.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.selfhealth_cast import ABSENT, ATTACHED, CPU, PID, conn_uuid, records
from webapp.traces.models import Host
from webapp.traces.store import store_batch

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
HOST = "web1"


@pytest.fixture()
def client() -> Client:
    Host.objects.create(name=HOST)
    store_batch(records(HOST))
    c = Client()
    c.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    return c


def test_the_status_page_and_its_api_need_a_login() -> None:
    resp = Client().get("/api/dash/status")
    assert (resp.status_code, resp.json()) == (401, {"error": "login required"})
    page = Client().get("/status/")
    assert page.status_code == 302 and page["Location"].startswith("/accounts/login/")


def test_the_page_links_from_the_navigation(client: Client) -> None:
    page = client.get("/status/")
    assert page.status_code == 200
    assert b'<a href="/status/" aria-current="page">Status</a>' in page.content


def test_it_shows_the_attach_coverage_of_the_newest_status(client: Client) -> None:
    d = client.get("/api/dash/status").json()
    assert [h["host_id"] for h in d["hosts"]] == [HOST] and d["cpu_budget"] == 5.0
    s = d["hosts"][0]["status"]
    assert (s["pid"], s["providers"], s["attached"], s["absent"], s["ppl"]) == (
        PID,
        ["tcp", "siftr"],
        ATTACHED,
        ABSENT,
        4,
    )
    assert sorted(s["rules_unavailable"]) == ["K11", "K12"]
    assert "tcp_cong_state_set absent on this kernel" in s["rules_degraded"]["K6"]


def test_it_serves_the_cpu_series_sampling_losses_and_self_health_alerts(client: Client) -> None:
    h = client.get("/api/dash/status", {"host": HOST}).json()["hosts"][0]
    assert h["stats"]["cpu_percent"] == CPU
    assert h["stats"]["events_per_s"] == [400.0, 800.0, 1200.0]
    assert h["latest"]["cpu_percent"] == CPU[-1]
    assert [(r["event_type"], r["setting"], r["ratio"]) for r in h["sampling"]] == [("siftr_sample", "ppl 4", 4.0)]
    assert h["losses"] == [{"event_type": "siftr_sample", "lost": 3}]
    assert [(a["rule_id"], a["severity"], a["status"], a["metric"]) for a in h["alerts"]] == [
        ("H4", "warning", "open", 7.5)
    ]
    assert "used 7.5% of one CPU" in h["alerts"][0]["message"]


def test_a_host_without_records_has_an_empty_panel(client: Client) -> None:
    h = client.get("/api/dash/status", {"host": "nobody"}).json()["hosts"][0]
    assert (h["status"], h["latest"], h["stats"]["t"], h["sampling"], h["alerts"]) == (None, None, [], [], [])


def test_a_connection_shows_its_sampling_windows(client: Client) -> None:
    d = client.get(f"/api/dash/connections/{conn_uuid(HOST)}").json()["sampling"]
    assert (d["packets"], d["samples"], d["ratio"]) == (1200, 200, 6.0)
    assert [(w["packets"], w["samples"], w["ratio"]) for w in d["windows"]] == [(800, 100, 8.0), (400, 100, 4.0)]
