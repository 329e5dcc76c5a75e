"""The status page's JSON view (/api/dash/status) and a connection's sampling windows
(/api/dash/connections/<uuid>): login, the newest collector_status with its attach
coverage, the CPU series and the H4 budget, sampling, losses and self-health alerts.
Records: tests/selfhealth_cast.py."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.selfhealth_cast import ABSENT, ATTACHED, CPU, PID, _env, conn_uuid, records
from translators.records import CollectorStats, CollectorStatus, FlowCounters
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


def test_a_window_across_a_new_collector_session_counts_from_zero(client: Client) -> None:
    """A restart or a swap of the collector's programs starts siftr's counts again (fresh
    maps); the session's collector_status comes first. The window across it is the new
    session's counts, not their difference from the old one's (30 buffers here, where
    the old session had counted 120), nor skipped."""
    host = "swapped"
    Host.objects.create(name=host)
    flow = {"conn_uuid": conn_uuid(host), "sock_cookie": 5, "ip_ver": 4, "src": "10.9.0.1", "sport": 40001,
            "dst": "10.9.0.2", "dport": 443}  # fmt: skip

    def counts(seq: int, dt: float, skbs: int, samples: int) -> FlowCounters:
        return FlowCounters(**_env(host, seq, dt, "siftr", "flow-counters", **flow), proto="tcp", packets_in=0,
                            packets_out=0, skbs=skbs, samples=samples)  # fmt: skip

    started = CollectorStatus(**_env(host, 3, 3.5, "nettrail", "status"), providers=["tcp", "siftr"], attached={})
    store_batch([counts(1, 2, 60, 10), counts(2, 3, 120, 20), started, counts(4, 4, 150, 25), counts(5, 5, 210, 35)])
    d = client.get(f"/api/dash/connections/{conn_uuid(host)}", {"host": host}).json()["sampling"]
    assert [(w["packets"], w["samples"]) for w in d["windows"]] == [(60, 10), (60, 10), (150, 25), (60, 10)]


def test_it_serves_the_agents_whole_cost_beside_its_process_cpu(client: Client) -> None:
    """Each interval's programs' kernel time and children's CPU in percent of one CPU, as
    cpu_percent is, and the whole (H4's measure); unknown stays null, never 0."""
    host = "measured"
    Host.objects.create(name=host)

    def stats(seq: int, programs_ns: int | None, agent: float | None) -> CollectorStats:
        return CollectorStats(
            **_env(host, seq, 10 * seq, "nettrail", "stats", pid=PID, tgid=PID, comm="nettrail"), interval_s=10.0,
            cpu_time_s=0.3, cpu_total_s=0.3 * seq, cpu_percent=3.0, events=10, events_per_s=1.0, records=10,
            children_cpu_time_s=None if agent is None else 0.02, children_cpu_total_s=None if agent is None else 0.05,
            programs_run_time_ns=programs_ns, programs_run_count=None if programs_ns is None else 4000,
            programs_run_time_total_ns=None if programs_ns is None else programs_ns * seq, agent_cpu_percent=agent,
        )  # fmt: skip

    store_batch([stats(1, 250_000_000, 5.7), stats(2, None, None)])
    h = client.get("/api/dash/status", {"host": host}).json()["hosts"][0]
    st = h["stats"]
    assert (st["cpu_percent"], st["agent_cpu_percent"]) == ([3.0, 3.0], [5.7, None])
    assert (st["programs_percent"], st["children_percent"]) == ([2.5, None], [0.2, None])
    unknown = h["latest"]  # the newest interval could not measure its programs
    assert [unknown[k] for k in ("programs_run_time_ns", "programs_run_count", "agent_cpu_percent")] == [None] * 3
    store_batch([stats(3, 100_000_000, 4.2)])
    latest = client.get("/api/dash/status", {"host": host}).json()["hosts"][0]["latest"]
    assert {k: latest[k] for k in ("programs_run_time_ns", "programs_run_count", "programs_run_time_total_ns",
                                   "children_cpu_time_s", "children_cpu_total_s", "agent_cpu_percent",
                                   "programs_percent", "children_percent")} == {
        "programs_run_time_ns": 100_000_000, "programs_run_count": 4000, "programs_run_time_total_ns": 300_000_000,
        "children_cpu_time_s": 0.02, "children_cpu_total_s": 0.05, "agent_cpu_percent": 4.2,
        "programs_percent": 1.0, "children_percent": 0.2,
    }  # fmt: skip
