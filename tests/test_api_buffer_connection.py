"""Buffers <-> connections in the read APIs: a connection's lifecycle lists its skb events
and drops, and a dropped buffer's record (/api/dash/skb/<uid>) links back to its connection."""

from __future__ import annotations

import pytest
from api_cast import CONN_A, get_json
from django.test import Client

pytest_plugins = ["api_fixtures"]
pytestmark = [pytest.mark.usefixtures("cast"), pytest.mark.postgres]


def test_a_connections_lifecycle_lists_its_buffers_and_drops(viewer_client: Client) -> None:
    body = get_json(viewer_client, f"/api/connections/{CONN_A}/lifecycle", kind="skb_event,skb_drop")
    got = [(rec["kind"], rec["skb_uid"], rec.get("stage"), rec.get("drop_reason_str")) for rec in body["records"]]
    assert got == [
        ("skb_event", 77, "rx-first", None),  # seen before the socket: tied by skb_uid
        ("skb_event", 77, "rx-deliver", None),
        ("skb_drop", 78, None, "TCP_CSUM"),
    ]


def test_a_dropped_buffer_links_back_to_its_connection(viewer_client: Client) -> None:
    body = get_json(viewer_client, "/api/dash/skb/78")
    assert body["skb"]["skb_uid"] == 78 and body["skb"]["conn_uuid"] == CONN_A
    assert (body["skb"]["drop"]["reason"], body["skb"]["end"]) == ("TCP_CSUM", "dropped")
    assert body["conn"]["conn_uuid"] == CONN_A and body["conn"]["comm"] == "curl"


def test_a_drop_without_a_socket_has_no_connection(viewer_client: Client) -> None:
    body = get_json(viewer_client, "/api/dash/skb/90")
    assert body["skb"]["conn_uuid"] is None and body["conn"] is None
    assert body["skb"]["drop"] == {"reason": "NO_SOCKET", "location": "nf+0x1"}


def test_the_buffers_page_narrowed_to_a_connection_shows_only_its_buffers(viewer_client: Client) -> None:
    body = get_json(viewer_client, "/api/dash/buffers", conn=CONN_A)
    assert sorted(life["skb_uid"] for life in body["lifecycles"]) == [77, 78]
    assert {life["conn_uuid"] for life in body["lifecycles"]} == {CONN_A}
