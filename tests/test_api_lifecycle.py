"""/api/connections/<uuid> and /api/connections/<uuid>/lifecycle: one connection, everything in time order."""

from __future__ import annotations

import pytest
from api_cast import CONN_A, CONN_B, get_json
from django.test import Client

pytest_plugins = ["api_fixtures"]
pytestmark = [pytest.mark.usefixtures("cast"), pytest.mark.postgres]

A_LIFECYCLE = [
    ("tcp_state", 1000.0),
    ("tcp_state", 1001.0),
    ("siftr_sample", 1002.0),
    ("tcpdebug_snapshot", 1003.0),
    ("tcp_retransmit", 1004.0),
    ("tcp_cong_state", 1005.0),
    ("skb_event", 1006.0),  # tied to A only through skb_uid 77
    ("skb_event", 1007.0),
    ("skb_drop", 1008.0),
    ("tcp_reset", 1009.0),
    ("alert", 1010.0),
]


def test_the_summary_has_the_row_and_record_counts_per_kind(viewer_client: Client) -> None:
    body = get_json(viewer_client, f"/api/connections/{CONN_A}")
    assert body["connection"]["conn_uuid"] == CONN_A
    assert body["connection"]["srtt_us"] == 150
    assert body["records"] == {
        "tcp_state": 2, "tcp_retransmit": 1, "tcp_reset": 1, "tcp_cong_state": 1, "siftr_sample": 1,
        "tcpdebug_snapshot": 1, "skb_event": 1, "skb_drop": 1, "alert": 1,
    }  # fmt: skip
    assert body["summary"] is None


def test_the_lifecycle_is_every_record_of_the_connection_in_time_order(viewer_client: Client) -> None:
    body = get_json(viewer_client, f"/api/connections/{CONN_A}/lifecycle")
    assert [(rec["kind"], rec["ts_wall"]) for rec in body["records"]] == A_LIFECYCLE
    assert body["next"] is None
    first, reset = body["records"][0], body["records"][9]
    assert (first["prev_state"], first["state"], first["comm"], first["seq"]) == ("CLOSED", "SYN_SENT", "curl", 1)
    assert (reset["sender"], reset["state"]) == ("peer", "ESTABLISHED")
    assert body["records"][6]["conn_uuid"] is None and body["records"][6]["skb_uid"] == 77


def test_lifecycle_pages_continue_exactly_where_the_last_one_stopped(viewer_client: Client) -> None:
    got = []
    cursor = None
    for _ in range(10):
        params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        body = get_json(viewer_client, f"/api/connections/{CONN_A}/lifecycle", **params)
        got.extend((rec["kind"], rec["ts_wall"]) for rec in body["records"])
        cursor = body["next"]
        if cursor is None:
            break
    assert got == A_LIFECYCLE


def test_a_quiet_connection_has_its_one_record(viewer_client: Client) -> None:
    body = get_json(viewer_client, f"/api/connections/{CONN_B}/lifecycle")
    assert [(rec["kind"], rec["state"]) for rec in body["records"]] == [("tcp_state", "ESTABLISHED")]


def test_an_unknown_connection_is_a_404(viewer_client: Client) -> None:
    assert get_json(viewer_client, "/api/connections/nope", 404) == {"error": "no connection nope"}
    assert get_json(viewer_client, "/api/connections/nope/lifecycle", 404) == {"error": "no connection nope"}


def test_a_bad_lifecycle_cursor_is_a_400(viewer_client: Client) -> None:
    body = get_json(viewer_client, f"/api/connections/{CONN_A}/lifecycle", 400, cursor="WzFd")
    assert body == {"error": "cursor is not a cursor this API gave out"}


def test_the_lifecycle_can_be_narrowed_to_some_kinds(viewer_client: Client) -> None:
    body = get_json(viewer_client, f"/api/connections/{CONN_A}/lifecycle", kind="tcp_state,skb_event")
    assert [(rec["kind"], rec["ts_wall"]) for rec in body["records"]] == [
        (kind, ts) for kind, ts in A_LIFECYCLE if kind in ("tcp_state", "skb_event")
    ]
    bad = get_json(viewer_client, f"/api/connections/{CONN_A}/lifecycle", 400, kind="tcp_state,loss_report")
    assert bad["error"].startswith("kind 'loss_report' is not a connection record kind")
