"""Byte and packet directions are the local socket's, on the active and the passive side alike.

API level: the two ends of one loopback transfer (one host, two socket cookies) stored through
ingest, in both arrival orders of their state and counter records; then /api/connections,
/api/dash/connections/<uuid> and the report export must say the sender sent and the receiver
received. Kernel level: the same through the real collector (`nettrail collect`), for a
transfer with a known size each way (tests/test_connection_directions_kernel.py).
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments
from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from webapp_cast import BOOT, Cast, cast, env, post  # noqa: F401 (cast is a fixture)

from translators import records as r
from translators.records import connection_uuid

SENT = 3_300_000  # client -> server payload
REPLY = 85  # server -> client payload
CLIENT, SERVER = 11, 12  # socket cookies
CLIENT_PORT, SERVER_PORT = 40500, 8080


def side(cookie: int, seq: int, active: bool, out: tuple[int, int], into: tuple[int, int]) -> list[r.Record]:
    local, remote = (CLIENT_PORT, SERVER_PORT) if active else (SERVER_PORT, CLIENT_PORT)
    flow = {"src": "127.0.0.1", "sport": local, "dst": "127.0.0.1", "dport": remote, "ip_ver": 4}
    uuid = connection_uuid("host-a", BOOT, cookie)
    ident = {"conn_uuid": uuid, "sock_cookie": cookie, **flow}
    opened = r.TcpStateChange(
        **env("host-a", seq, **ident),
        provider="tcp",
        probe="state-change",
        prev_state="SYN_SENT" if active else "SYN_RECEIVED",
        state="ESTABLISHED",
        active=active,
    )
    counters = r.FlowCounters(
        **env("host-a", seq + 1, **ident),
        provider="tcp",
        probe="flow-counters",
        proto="tcp",
        bytes_out=out[0],
        packets_out=out[1],
        bytes_in=into[0],
        packets_in=into[1],
    )
    return [opened, counters]


def both_sides() -> tuple[list[r.Record], list[r.Record]]:
    client = side(CLIENT, 1, True, out=(SENT, 80), into=(REPLY, 41))
    server = side(SERVER, 3, False, out=(REPLY, 41), into=(SENT, 80))
    return client, server


def viewer(cast: Cast) -> Client:
    client = Client()
    client.force_login(cast.viewer)
    return client


@pytest.mark.parametrize("counters_first", [False, True], ids=["state-then-counters", "counters-then-state"])
def test_each_side_shows_what_its_own_socket_sent_and_received(cast: Cast, counters_first: bool) -> None:
    client, server = both_sides()
    batch = [client[1], server[1], client[0], server[0]] if counters_first else client + server
    for rec in batch:  # one record per batch: the order of arrival is the order above
        assert post(Client(), cast.token_a, [rec]).status_code == 200
    rows = viewer(cast).get("/api/connections", {"host": "host-a"}).json()["connections"]
    by_port = {row["sport"]: row for row in rows}
    local = ("bytes_out", "bytes_in", "packets_out", "packets_in")
    assert [by_port[CLIENT_PORT][k] for k in local] == [SENT, REPLY, 80, 41]
    assert [by_port[SERVER_PORT][k] for k in local] == [REPLY, SENT, 41, 80]
    # The originator/responder view agrees: the client opened it on both rows.
    for row in rows:
        assert (row["bytes_orig"], row["bytes_resp"]) == (SENT, REPLY)


def test_the_connection_page_data_and_the_export_use_the_local_view(cast: Cast) -> None:
    client, server = both_sides()
    assert post(Client(), cast.token_a, client + server).status_code == 200
    browser = viewer(cast)
    uuid = connection_uuid("host-a", BOOT, SERVER)
    conn = browser.get(f"/api/dash/connections/{uuid}").json()["conn"]
    assert (conn["bytes_out"], conn["bytes_in"], conn["packets_out"], conn["packets_in"]) == (REPLY, SENT, 41, 80)
    report = browser.get(f"/api/connections/{uuid}/export", {"format": "json"})
    body: dict[str, Any] = json.loads(b"".join(report.streaming_content))  # type: ignore[attr-defined]
    (row,) = body["nettrail_report"]["connection"]
    assert (row["bytes_out"], row["bytes_in"], row["packets_out"], row["packets_in"]) == (REPLY, SENT, 41, 80)


def test_a_capture_connection_is_seen_from_its_originator(cast: Cast) -> None:
    summary = r.Connection(
        **env("host-a", 1, conn_uuid=r.flow_uuid("host-a", BOOT, "tcp", 0)),
        provider="tcp",
        probe="conn-summary",
        proto="tcp",
        stream=0,
        source="wire",
        bytes_orig=500,
        bytes_resp=20_000,
        packets_orig=9,
        packets_resp=16,
    )
    assert post(Client(), cast.token_a, [summary]).status_code == 200
    (row,) = viewer(cast).get("/api/connections", {"host": "host-a"}).json()["connections"]
    assert (row["bytes_out"], row["bytes_in"], row["packets_out"], row["packets_in"]) == (500, 20_000, 9, 16)
