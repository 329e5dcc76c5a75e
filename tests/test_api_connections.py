"""/api/connections: every filter with exact results, cursor pages, bad parameters."""

from __future__ import annotations

import pytest
from api_cast import CONN_A, CONN_B, CONN_C, get_json
from django.test import Client

from webapp.api.params import encode_cursor
from webapp.traces.models import Connection

pytest_plugins = ["api_fixtures"]
pytestmark = [pytest.mark.usefixtures("cast"), pytest.mark.postgres]


def uuids(client: Client, **params: object) -> list[str]:
    return [c["conn_uuid"] for c in get_json(client, "/api/connections", **params)["connections"]]


def test_it_lists_connections_most_recent_first_with_their_fields(viewer_client: Client) -> None:
    body = get_json(viewer_client, "/api/connections")
    assert [c["conn_uuid"] for c in body["connections"]] == [CONN_C, CONN_B, CONN_A]
    assert body["next"] is None
    a = body["connections"][2]
    assert {k: a[k] for k in ("host_id", "src", "sport", "dst", "dport", "state", "comm", "pid", "uid")} == {
        "host_id": "alpha", "src": "10.0.0.1", "sport": 40000, "dst": "10.0.0.2", "dport": 443,
        "state": "ESTABLISHED", "comm": "curl", "pid": 100, "uid": 1000,
    }  # fmt: skip
    assert (a["retransmits"], a["resets"], a["alerts"], a["anomaly"]) == (1, 1, 1, True)
    assert "id" not in a


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"host": "alpha"}, [CONN_B, CONN_A]),
        ({"host": "gamma"}, []),
        ({"comm": "curl"}, [CONN_C, CONN_A]),
        ({"pid": "200"}, [CONN_B]),
        ({"uid": "1000"}, [CONN_C, CONN_A]),
        ({"port": "443"}, [CONN_C, CONN_A]),
        ({"port": "51000"}, [CONN_B]),
        ({"addr": "10.0.0.2"}, [CONN_B, CONN_A]),
        ({"addr": "2001:0db8:0:0::1"}, [CONN_C]),
        ({"state": "SYN_SENT"}, [CONN_C]),
        ({"has_anomaly": "true"}, [CONN_A]),
        ({"has_anomaly": "false"}, [CONN_C, CONN_B]),
        ({"since": "1500"}, [CONN_C, CONN_B]),
        ({"until": "1500"}, [CONN_A]),
        ({"since": "1005", "until": "2500"}, [CONN_B, CONN_A]),
        ({"comm": "curl", "host": "beta", "port": "5555"}, [CONN_C]),
    ],
)
def test_each_filter_selects_exactly_the_matching_connections(
    viewer_client: Client, params: dict[str, str], expected: list[str]
) -> None:
    assert uuids(viewer_client, **params) == expected


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"pid": "abc"}, "pid must be a whole number, got 'abc'"),
        ({"port": "70000"}, "port must be at most 65535"),
        ({"addr": "10.0.0"}, "addr must be an IPv4 or IPv6 address, got '10.0.0'"),
        ({"state": "OPEN"}, "state must be one of CLOSED, LISTEN, SYN_SENT"),
        ({"has_anomaly": "maybe"}, "has_anomaly must be true or false, got 'maybe'"),
        ({"since": "nan"}, "since must be a finite number"),
        ({"since": "10", "until": "5"}, "since is after until"),
        ({"cursor": "!!"}, "cursor is not a cursor this API gave out"),
        ({"cursor": encode_cursor(["x", 1])}, "cursor is not a cursor this API gave out"),
        ({"limit": "0"}, "limit must be at least 1"),
        ({"proc": "curl"}, "unknown parameter 'proc'"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(viewer_client: Client, params: dict[str, str], message: str) -> None:
    assert get_json(viewer_client, "/api/connections", 400, **params)["error"].startswith(message)


def test_cursor_pages_walk_5000_connections_exactly_once_in_order(viewer_client: Client) -> None:
    Connection.objects.bulk_create(
        Connection(
            host_id="bulk", boot_id="b", conn_uuid=f"bulk-{i:05d}", first_seen=i // 3, last_seen=i // 3, comm="bulk"
        )
        for i in range(5000)
    )  # three connections share each last_seen: the id breaks the ties
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"host": "bulk", "limit": "700", **({"cursor": cursor} if cursor else {})}
        body = get_json(viewer_client, "/api/connections", **params)
        seen.extend(c["conn_uuid"] for c in body["connections"])
        pages += 1
        cursor = body["next"]
        if cursor is None:
            break
    assert pages == 8
    assert seen == [f"bulk-{i:05d}" for i in reversed(range(5000))]


def test_an_anonymous_caller_gets_a_json_401(client: Client) -> None:
    answer = client.get("/api/connections")
    assert (answer.status_code, answer.json()) == (401, {"error": "login required"})


def test_a_post_is_refused(viewer_client: Client) -> None:
    assert viewer_client.post("/api/connections").status_code in (403, 405)  # CSRF first, then the method


def test_either_side_filters_page_through_both_sides_without_repeats(viewer_client: Client) -> None:
    # 300 connections: port 7000 as the source (i % 3 == 0), the destination (i % 3 == 1), or both (i % 3 == 2).
    sides = ((7000, 1), (1, 7000), (7000, 7000))
    Connection.objects.bulk_create(
        Connection(host_id="sides", boot_id="b", conn_uuid=f"side-{i:03d}", first_seen=i, last_seen=i,
                   sport=sides[i % 3][0], dport=sides[i % 3][1], src="10.9.0.1", dst="10.9.0.2")
        for i in range(300)
    )  # fmt: skip
    seen: list[str] = []
    cursor = None
    for _ in range(20):
        body = get_json(
            viewer_client, "/api/connections", port="7000", limit="40", **({"cursor": cursor} if cursor else {})
        )
        seen.extend(c["conn_uuid"] for c in body["connections"])
        cursor = body["next"]
        if cursor is None:
            break
    assert seen == [f"side-{i:03d}" for i in reversed(range(300))]
    both = uuids(viewer_client, port="7000", addr="10.9.0.2", limit="1000")
    assert len(both) == 300 == len(set(both))
