"""Both ends of one connection stitched in the dashboard (issue 19 item 6), on stored records.

Host A (`host-a`) opened 10.0.0.1:40000 -> 10.0.0.2:443 and host B (`host-b`)
accepted it; B's clock runs 3.217 s ahead. Both ship through /api/ingest with
their own tokens. The connection page of either half shows the other, the two on
one axis with B's times moved by the estimated offset; the host tokens still read
nothing of it (the stitched view is for dashboard users). One host over loopback
(both sockets on host A) shares one clock.
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments
from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from webapp_cast import BOOT, T0, Cast, cast, post  # noqa: F401 (cast is a fixture)

from translators import records as r
from translators.records import connection_uuid

THETA = 3.217
A_FLOW = {"src": "10.0.0.1", "sport": 40000, "dst": "10.0.0.2", "dport": 443, "ip_ver": 4}
B_FLOW = {"src": "10.0.0.2", "sport": 443, "dst": "10.0.0.1", "dport": 40000, "ip_ver": 4}


def side(
    host: str, cookie: int, flow: dict[str, Any], shift: float, events: list[tuple[float, str, dict[str, Any]]]
) -> list[Any]:
    conn = connection_uuid(host, BOOT, cookie)
    out: list[Any] = []
    for seq, (t, kind, fields) in enumerate(events, start=1):
        env = {"host_id": host, "boot_id": BOOT, "seq": seq, "ts_ns": int(round(t * 1e9)), "ts_wall": T0 + t + shift}
        env.update(conn_uuid=conn, sock_cookie=cookie)
        if kind == "state":
            out.append(r.TcpStateChange(**env, **flow, provider="tcp", probe="state-change", **fields))
        elif kind == "siftr":
            out.append(r.SiftrSample(**env, **flow, provider="siftr", probe="siftr", **fields))
        elif kind == "retransmit":
            out.append(r.TcpRetransmit(**env, **flow, provider="tcp", probe="retransmit", retrans_kind="rto"))
        else:
            out.append(r.SkbDrop(**env, provider="skb", probe="m-free", drop_reason=2, drop_reason_str="NO_SOCKET"))
    return out


def a_records(host: str = "host-a", cookie: int = 11) -> list[Any]:
    return side(host, cookie, A_FLOW, 0.0, [
        (1000.000, "state", {"prev_state": "CLOSED", "state": "SYN_SENT", "active": True}),
        (1000.010, "state", {"prev_state": "SYN_SENT", "state": "ESTABLISHED", "active": True}),
        (1000.011, "siftr", {"direction": "out", "th_seq": 1000, "th_ack": 5000, "srtt": 400}),
        (1000.0131, "siftr", {"direction": "in", "th_seq": 5000, "th_ack": 2448, "srtt": 400}),
        (1000.015, "retransmit", {}),
        (1000.020, "state", {"prev_state": "ESTABLISHED", "state": "FIN_WAIT_1"}),
        (1000.0205, "state", {"prev_state": "FIN_WAIT_1", "state": "FIN_WAIT_2"}),
        (1000.0213, "state", {"prev_state": "FIN_WAIT_2", "state": "TIME_WAIT"}),
    ])  # fmt: skip


def b_records(host: str = "host-b", cookie: int = 22, shift: float = THETA, flow: dict[str, Any] = B_FLOW) -> list[Any]:
    return side(host, cookie, flow, shift, [
        (1000.0104, "state", {"prev_state": "LISTEN", "state": "SYN_RECEIVED", "active": False}),
        (1000.0104, "state", {"prev_state": "SYN_RECEIVED", "state": "ESTABLISHED", "active": False}),
        (1000.0113, "siftr", {"direction": "in", "th_seq": 1000, "th_ack": 5000, "srtt": 300}),
        (1000.0126, "siftr", {"direction": "out", "th_seq": 5000, "th_ack": 2448, "srtt": 300}),
        (1000.013, "drop", {}),
        (1000.0202, "state", {"prev_state": "ESTABLISHED", "state": "CLOSE_WAIT"}),
        (1000.021, "state", {"prev_state": "CLOSE_WAIT", "state": "LAST_ACK"}),
    ])  # fmt: skip


A_UUID, B_UUID = connection_uuid("host-a", BOOT, 11), connection_uuid("host-b", BOOT, 22)


@pytest.fixture
def both(cast: Cast) -> Client:
    assert post(Client(), cast.token_a, a_records()).status_code == 200
    assert post(Client(), cast.token_b, b_records()).status_code == 200
    viewer = Client()
    viewer.force_login(cast.viewer)
    return viewer


def stitched(client: Client, uuid: str, host: str) -> Any:
    answer = client.get(reverse("dashboard:api-stitched", args=[uuid]), {"host": host})
    assert answer.status_code == 200, answer.content
    return answer.json()


def test_either_half_finds_the_other_and_both_show_the_same_pair_on_one_axis(both: Client) -> None:
    from_a, from_b = stitched(both, A_UUID, "host-a"), stitched(both, B_UUID, "host-b")
    halves = [(h["name"], h["host"], h["conn_uuid"], h["opener"]) for h in from_a["halves"]]
    assert halves == [("A", "host-a", A_UUID, True), ("B", "host-b", B_UUID, False)]
    assert [(h["host"], h["conn_uuid"]) for h in from_b["halves"]] == [("host-a", A_UUID), ("host-b", B_UUID)]
    assert (from_a["this"], from_b["this"]) == ("A", "B")
    assert from_a["halves"][1]["url"] == f"/connections/{B_UUID}/?host=host-b"  # the peer's view, linked
    assert from_b["halves"][0]["url"] == f"/connections/{A_UUID}/?host=host-a"
    counts = [h["counts"] for h in from_a["halves"]]
    assert counts == [
        {"states": 5, "siftr": 2, "retransmits": 1, "drops": 0},
        {"states": 4, "siftr": 2, "retransmits": 0, "drops": 1},
    ]

    clock = from_a["clock"]
    assert (clock["same_clock"], clock["aligned"], clock["consistent"]) == (False, True, True)
    assert clock["pairs"] == {"a_to_b": 3, "b_to_a": 3}
    # abs=1e-6 s (1e-3 ms below): wall times near T0 (1.7e9 s) are doubles good to 2.4e-7 s
    assert clock["offset_s"] == pytest.approx(THETA - 0.00005, abs=1e-6)
    assert clock["error_s"] == pytest.approx(0.00025, abs=1e-6)
    assert abs(clock["offset_s"] - THETA) <= clock["error_s"]

    # One axis: B's events land between A's where they happened (B moved back by the offset).
    assert [(e["side"], e["what"]) for e in from_a["events"]] == [
        ("A", "CLOSED → SYN_SENT"),
        ("A", "SYN_SENT → ESTABLISHED"),
        ("B", "LISTEN → SYN_RECEIVED"),
        ("B", "SYN_RECEIVED → ESTABLISHED"),
        ("B", "drop NO_SOCKET"),
        ("A", "retransmit (rto)"),
        ("A", "ESTABLISHED → FIN_WAIT_1"),
        ("B", "ESTABLISHED → CLOSE_WAIT"),
        ("A", "FIN_WAIT_1 → FIN_WAIT_2"),
        ("B", "CLOSE_WAIT → LAST_ACK"),
        ("A", "FIN_WAIT_2 → TIME_WAIT"),
    ]
    assert from_a["events"][2]["at_ms"] == pytest.approx(10.45, abs=1e-3)  # 10.4 ms + the 0.05 ms estimate error
    assert from_a["events"] == from_b["events"]


def test_the_connection_page_shows_both_ends_with_the_offset(both: Client) -> None:
    page = both.get(reverse("dashboard:connection", args=[A_UUID]), {"host": "host-a"}).content.decode()
    assert 'id="stitched"' in page
    assert f'href="/connections/{B_UUID}/?host=host-b"' in page
    assert 'Clock offset of B from A: <strong id="stitched-offset">3.216950 s ± 0.000250 s</strong>' in page
    assert page.count('class="st st-') == 9  # one bar per state change of either side


def test_host_tokens_still_read_nothing_and_a_lone_half_has_no_stitched_view(cast: Cast, both: Client) -> None:
    for token in (cast.token_a, cast.token_b):
        bearer = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
        answer = Client().get(reverse("dashboard:api-stitched", args=[A_UUID]), {"host": "host-a"}, **bearer)
        assert answer.status_code == 401
        assert Client().get(f"/api/connections/{B_UUID}", {"host": "host-b"}, **bearer).status_code in (401, 403)
    lone = connection_uuid("host-a", BOOT, 99)
    other = a_records(cookie=99)
    for rec in other:
        rec.sport, rec.seq = 40001, rec.seq + 100  # no mirror on host B; new records of host A
    assert post(Client(), cast.token_a, other).status_code == 200
    answer = both.get(reverse("dashboard:api-stitched", args=[lone]), {"host": "host-a"})
    assert (answer.status_code, answer.json()) == (404, {"error": "the other end of this connection was not traced"})
    assert (
        'id="stitched"'
        not in both.get(reverse("dashboard:connection", args=[lone]), {"host": "host-a"}).content.decode()
    )


def test_a_reused_tuple_with_other_sequence_numbers_is_not_the_peer(cast: Cast) -> None:
    assert post(Client(), cast.token_a, a_records()).status_code == 200
    impostor = b_records()
    for rec in impostor:
        if isinstance(rec, r.SiftrSample):
            rec.th_seq, rec.th_ack = rec.th_seq + 1_000_000, rec.th_ack + 1_000_000
    assert post(Client(), cast.token_b, impostor).status_code == 200
    viewer = Client()
    viewer.force_login(cast.viewer)
    assert viewer.get(reverse("dashboard:api-stitched", args=[A_UUID]), {"host": "host-a"}).status_code == 404


def test_one_host_over_loopback_shares_one_clock(cast: Cast) -> None:
    loop = {"src": "127.0.0.1", "sport": 40000, "dst": "127.0.0.1", "dport": 443, "ip_ver": 4}
    mirror = {"src": "127.0.0.1", "sport": 443, "dst": "127.0.0.1", "dport": 40000, "ip_ver": 4}
    client_side = side(
        "host-a", 31, loop, 0.0, [(1000.0, "state", {"prev_state": "SYN_SENT", "state": "ESTABLISHED", "active": True})]
    )
    server_side = b_records(host="host-a", cookie=32, shift=0.0, flow=mirror)
    for seq, rec in enumerate(server_side, start=2):
        rec.seq = seq
    assert post(Client(), cast.token_a, client_side + server_side).status_code == 200
    viewer = Client()
    viewer.force_login(cast.viewer)
    got = stitched(viewer, connection_uuid("host-a", BOOT, 32), "host-a")
    assert got["clock"] == {"same_clock": True, "aligned": True, "offset_s": 0.0, "error_s": 0.0}
    assert [(h["name"], h["conn_uuid"]) for h in got["halves"]] == [
        ("A", connection_uuid("host-a", BOOT, 31)),
        ("B", connection_uuid("host-a", BOOT, 32)),
    ]
    assert got["this"] == "B"


def listed(client: Client, **params: Any) -> tuple[list[tuple[str, str, Any]], int, int]:
    """The Connections list's (host, uuid, peer) rows, its total and how many rows it folded."""
    answer = client.get(reverse("dashboard:api-connections"), {"sort": "start", **params})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    rows = [(c["host_id"], c["conn_uuid"], c["peer"]) for c in body["rows"]]
    return rows, body["total"], body["folded"]


def test_the_connections_list_shows_a_connection_traced_at_both_ends_once(cast: Cast, both: Client) -> None:
    lone = a_records(cookie=99)  # host A's other connection: no other end traced
    for rec in lone:
        rec.sport, rec.seq = 40001, rec.seq + 100
    assert post(Client(), cast.token_a, lone).status_code == 200
    lone_uuid = connection_uuid("host-a", BOOT, 99)
    b_half = {"host_id": "host-b", "conn_uuid": B_UUID, "url": f"/connections/{B_UUID}/?host=host-b"}

    # The opener's row (A's) stands for both, linking B's half; the total still counts 3 rows.
    assert listed(both) == ([("host-a", A_UUID, b_half), ("host-a", lone_uuid, None)], 3, 1)
    assert listed(both, sort="-start") == ([("host-a", lone_uuid, None), ("host-a", A_UUID, b_half)], 3, 1)
    # A host filter selects that host's half: B's own row, alone on its page, nothing folded.
    assert listed(both, q="host host-b") == ([("host-b", B_UUID, None)], 1, 0)
    assert listed(both, q="host host-a") == ([("host-a", A_UUID, None), ("host-a", lone_uuid, None)], 2, 0)
    # Any filter that keeps both halves on the page folds them.
    assert listed(both, q="port 40000", limit=25) == ([("host-a", A_UUID, b_half)], 2, 1)
    # The live table's look-up of new connections folds the same way.
    assert listed(both, uuids=f"{B_UUID},{A_UUID}") == ([("host-a", A_UUID, b_half)], 2, 1)
    # The list is for dashboard users: a host token reads no one's halves through it.
    for token in (cast.token_a, cast.token_b):
        answer = Client().get(reverse("dashboard:api-connections"), HTTP_AUTHORIZATION=f"Bearer {token}")
        assert (answer.status_code, answer.json()) == (401, {"error": "login required"})


def test_the_connections_list_folds_one_hosts_loopback_halves_under_its_host_filter(cast: Cast) -> None:
    loop = {"src": "127.0.0.1", "sport": 40000, "dst": "127.0.0.1", "dport": 443, "ip_ver": 4}
    mirror = {"src": "127.0.0.1", "sport": 443, "dst": "127.0.0.1", "dport": 40000, "ip_ver": 4}
    server_side = b_records(host="host-a", cookie=32, shift=0.0, flow=mirror)
    client_side = side(
        "host-a", 31, loop, 0.0, [(1000.0, "state", {"prev_state": "SYN_SENT", "state": "ESTABLISHED", "active": True})]
    )
    for seq, rec in enumerate(client_side + server_side, start=1):
        rec.seq = seq
    assert post(Client(), cast.token_a, server_side + client_side).status_code == 200
    viewer = Client()
    viewer.force_login(cast.viewer)
    opener, other = connection_uuid("host-a", BOOT, 31), connection_uuid("host-a", BOOT, 32)
    peer = {"host_id": "host-a", "conn_uuid": other, "url": f"/connections/{other}/?host=host-a"}
    # Both sockets are host A's: its filter keeps both, shown once as the opener's row.
    assert listed(viewer, q="host host-a", sort="-start") == ([("host-a", opener, peer)], 2, 1)
