"""A connection's drops (webapp/dashboard/conn_drops.py): its socket's, and its packets'
dropped where no socket held them (forwarded through a router namespace on the host),
matched by 4-tuple in either direction while the connection lived; the Buffers page lists
the same drops for the connection and links a socketless drop to its connection."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from translators.records import Record, SkbDrop, TcpStateChange, connection_uuid
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db

HOST, BOOT, T = "fwd-host", "boot-1", 1_700_000_000.0
CLIENT, SERVER = ("10.77.41.1", 47770), ("10.77.42.2", 8080)
_seq = itertools.count(1)


def env(dt: float, **kw: Any) -> dict[str, Any]:
    seq = next(_seq)
    return {"host_id": HOST, "boot_id": BOOT, "seq": seq, "ts_ns": int((T + dt) * 1e9), "ts_wall": T + dt, **kw}


def connection(cookie: int, closed_at: float | None) -> list[Record]:
    tuple_ = {"src": CLIENT[0], "sport": CLIENT[1], "dst": SERVER[0], "dport": SERVER[1]}
    base = {"provider": "tcp", "probe": "state-change", "conn_uuid": connection_uuid(HOST, BOOT, cookie), **tuple_}
    out: list[Record] = [
        TcpStateChange(**env(0, **base), prev_state="CLOSED", state="SYN_SENT", ctx="task", comm="curl", pid=9),
        TcpStateChange(**env(0.001, **base), prev_state="SYN_SENT", state="ESTABLISHED", ctx="softirq"),
    ]
    if closed_at is not None:
        out.append(TcpStateChange(**env(closed_at, **base), prev_state="ESTABLISHED", state="CLOSED", ctx="task"))
    return out


def drop(dt: float, src: tuple[str, int], dst: tuple[str, int], reason: str, **kw: Any) -> SkbDrop:
    return SkbDrop(
        **env(dt, provider="skb", probe="m-free"), src=src[0], sport=src[1], dst=dst[0], dport=dst[1], ip_ver=4,
        l4_proto="tcp", drop_reason=93, drop_reason_str=reason, drop_location="ip_forward+0x2c0", len=1500,
        ctx="softirq", **kw,
    )  # fmt: skip


@pytest.fixture()
def client() -> Client:
    c = Client()
    c.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    return c


def page_drops(client: Client, uuid: str) -> list[tuple[Any, ...]]:
    body = client.get(f"/api/dash/connections/{uuid}", {"host": HOST}).json()
    return [(d["ts_wall"] - T, d["drop_reason_str"], d["matched"]) for d in body["drops"]]


def test_forwarded_drops_of_its_packets_either_direction_are_on_the_connections_page(client: Client) -> None:
    uuid = connection_uuid(HOST, BOOT, 1)
    store_batch(connection(1, closed_at=10.0))
    store_batch(
        [
            drop(1.0, CLIENT, SERVER, "PKT_TOO_BIG"),  # outgoing, at the router
            drop(2.0, SERVER, CLIENT, "NETFILTER_DROP"),  # incoming
            drop(3.0, CLIENT, SERVER, "SOCKET_RCVBUFF", conn_uuid=uuid),  # its own socket's
            drop(4.0, CLIENT, ("10.77.42.2", 8081), "PKT_TOO_BIG"),  # another flow
            drop(30.0, CLIENT, SERVER, "PKT_TOO_BIG"),  # a later connection of the same 4-tuple
        ]
    )
    assert page_drops(client, uuid) == [
        (3.0, "SOCKET_RCVBUFF", "socket"),
        (2.0, "NETFILTER_DROP", "addresses"),
        (1.0, "PKT_TOO_BIG", "addresses"),
    ]


def test_the_buffers_page_lists_the_same_drops_for_the_connection_and_links_a_socketless_drop(client: Client) -> None:
    uuid = connection_uuid(HOST, BOOT, 2)
    store_batch(connection(2, closed_at=None))  # open: later drops are its own
    store_batch([drop(1.0, CLIENT, SERVER, "PKT_TOO_BIG"), drop(50.0, CLIENT, SERVER, "PKT_TOO_BIG")])
    assert [d[0] for d in page_drops(client, uuid)] == [50.0, 1.0]
    body = client.get("/api/dash/buffers", {"conn": uuid}).json()
    assert [(r["ts_wall"] - T, r["conn_uuid"], r["src"], r["sport"], r["dst"], r["dport"]) for r in body["recent"]] == [
        (50.0, uuid, *CLIENT, *SERVER),
        (1.0, uuid, *CLIENT, *SERVER),
    ]
    every = client.get("/api/dash/buffers").json()["recent"]
    assert {(r["conn_uuid"], r["matched"]) for r in every} == {(uuid, "addresses")}
