"""/api/hosts, /api/drops, /api/alerts, /api/loss: exact rows and groups from the fixed cast."""

from __future__ import annotations

import pytest
from api_cast import CONN_A, get_json
from django.test import Client

pytest_plugins = ["api_fixtures"]
pytestmark = [pytest.mark.usefixtures("cast"), pytest.mark.postgres]


def test_hosts_are_listed_with_their_connection_counts(viewer_client: Client) -> None:
    hosts = get_json(viewer_client, "/api/hosts")["hosts"]
    assert [(h["name"], h["connections"]) for h in hosts] == [("alpha", 2), ("beta", 1)]
    assert isinstance(hosts[0]["created"], float)


def test_drops_by_reason_join_sampled_events_and_exact_counts(viewer_client: Client) -> None:
    body = get_json(viewer_client, "/api/drops")
    assert body == {
        "by": "reason",
        "groups": [
            {"reason": "NO_SOCKET", "events": 3, "counted": 10},
            {"reason": "TCP_CSUM", "events": 1, "counted": None},
        ],
        "total_events": 4,
        "total_counted": 10,
    }


def test_drops_by_location_and_by_process(viewer_client: Client) -> None:
    by_location = get_json(viewer_client, "/api/drops", by="location")["groups"]
    assert by_location == [
        {"reason": "NO_SOCKET", "location": "nf+0x1", "events": 3, "counted": 10},
        {"reason": "TCP_CSUM", "location": None, "events": 1, "counted": None},
    ]
    by_process = get_json(viewer_client, "/api/drops", by="process")["groups"]
    assert by_process == [
        {"comm": None, "tgid": None, "events": 3, "counted": None},
        {"comm": "curl", "tgid": 100, "events": 1, "counted": None},
    ]


def test_drops_over_a_time_range_and_host(viewer_client: Client) -> None:
    body = get_json(viewer_client, "/api/drops", since="1501", until="1550", host="alpha")
    assert body["groups"] == [{"reason": "NO_SOCKET", "events": 2, "counted": None}]
    assert get_json(viewer_client, "/api/drops", host="beta")["groups"] == []
    assert get_json(viewer_client, "/api/drops", 400, by="cpu")["error"].startswith("by must be one of reason")


@pytest.mark.parametrize(
    ("params", "rules"),
    [
        ({}, ["P4", "K1"]),
        ({"severity": "warning"}, ["K1"]),
        ({"rule": "P4"}, ["P4"]),
        ({"host": "alpha"}, ["K1"]),
        ({"status": "closed"}, ["P4"]),
        ({"conn": CONN_A}, ["K1"]),
        ({"since": "2000"}, ["P4"]),
        ({"until": "2000"}, ["K1"]),
    ],
)
def test_alert_filters(viewer_client: Client, params: dict[str, str], rules: list[str]) -> None:
    assert [a["rule_id"] for a in get_json(viewer_client, "/api/alerts", **params)["alerts"]] == rules


def test_an_alert_row_is_the_record_in_wire_form(viewer_client: Client) -> None:
    [alert] = get_json(viewer_client, "/api/alerts", rule="K1")["alerts"]
    assert (alert["kind"], alert["severity"], alert["status"], alert["message"], alert["count"]) == (
        "alert", "warning", "open", "reset", 1
    )  # fmt: skip
    assert alert["thresholds"] == {} and alert["evidence"] == []
    assert get_json(viewer_client, "/api/alerts", 400, severity="high")["error"].startswith("severity must be one of")


def test_loss_reports_newest_first_with_filters_and_pages(viewer_client: Client) -> None:
    body = get_json(viewer_client, "/api/loss")
    assert [(x["host_id"], x["lost"]) for x in body["loss_reports"]] == [("beta", 2), ("alpha", 5)]
    page = get_json(viewer_client, "/api/loss", limit="1")
    assert [x["host_id"] for x in page["loss_reports"]] == ["beta"]
    rest = get_json(viewer_client, "/api/loss", limit="1", cursor=page["next"])
    assert ([x["host_id"] for x in rest["loss_reports"]], rest["next"]) == (["alpha"], None)
    assert get_json(viewer_client, "/api/loss", host="alpha", event_type="ringbuf")["loss_reports"][0]["lost"] == 5
    assert get_json(viewer_client, "/api/loss", event_type="other")["loss_reports"] == []
