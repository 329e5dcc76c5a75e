"""The UDP page's Errors column counts the datagrams a full receive buffer refused (the skb
provider's SOCKET_RCVBUFF drops of the flow, else the receiving socket's udp-fail-queue
events, never both), and its address/port filter keeps the datagrams with that address or
port at either end (issue 34 item 5)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.test_dashboard_udp_flows import HOST, A, B, record
from translators.records import Record, SkbDrop, SockEvent, connection_uuid
from webapp.traces.models import Host
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db

SERVER_SOCKET = connection_uuid(HOST, "b", 77)
_seq = itertools.count(10_000)


@pytest.fixture()
def client() -> Client:
    Host.objects.create(name=HOST)
    c = Client()
    c.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    return c


def env(**kw: Any) -> dict[str, Any]:
    seq = next(_seq)
    return {"host_id": HOST, "boot_id": "b", "seq": seq, "ts_ns": seq, "ts_wall": 1_700_000_000.0 + seq, **kw}


def rcvbuf_drop(src: tuple[str, int], dst: tuple[str, int], conn_uuid: str | None) -> SkbDrop:
    return SkbDrop(
        **env(provider="skb", probe="m-free"), src=src[0], sport=src[1], dst=dst[0], dport=dst[1], l4_proto="udp",
        drop_reason=6, drop_reason_str="SOCKET_RCVBUFF", drop_location="__udp_queue_rcv_skb+0x5a", conn_uuid=conn_uuid,
    )  # fmt: skip


def fail_queue(local: tuple[str, int], conn_uuid: str) -> SockEvent:
    return SockEvent(
        **env(provider="udp", probe="udp-fail-queue"), src=local[0], sport=local[1], proto="udp", rc=-12,
        rcvbuf=2304, conn_uuid=conn_uuid,
    )  # fmt: skip


def server_receive(size: int) -> Record:
    r: Record = record("receive", True, B, A, "server", size)
    r.conn_uuid = SERVER_SOCKET
    return r


def flows(client: Client, **params: str) -> list[tuple[Any, ...]]:
    body = client.get("/api/dash/udp", {"host": HOST, **params}).json()
    return sorted(((f["comm"], f["datagrams"], f["errors"], f["rcvbuf_drops"]) for f in body["flows"]), key=str)


def test_errors_count_the_receive_buffer_drops_on_the_receiving_sockets_row(client: Client) -> None:
    store_batch(
        [record("send", True, A, B, "client", 10) for _ in range(5)]
        + [server_receive(10)]  # one read, four refused
        + [rcvbuf_drop(A, B, SERVER_SOCKET) for _ in range(4)]
        + [fail_queue(B, SERVER_SOCKET) for _ in range(4)]  # the same four: not counted again
    )
    assert flows(client) == [("client", 5, 0, 0), ("server", 1, 4, 4)]


def test_without_skb_drops_the_sockets_fail_queue_events_count(client: Client) -> None:
    store_batch([server_receive(10), *(fail_queue(B, SERVER_SOCKET) for _ in range(3))])
    assert flows(client) == [("server", 1, 3, 3)]


def test_a_drop_whose_socket_has_no_row_goes_to_its_flows_row(client: Client) -> None:
    store_batch([record("send", True, A, B, "client", 10), rcvbuf_drop(A, B, SERVER_SOCKET)])
    assert flows(client) == [("client", 1, 1, 1)]


def test_the_filter_keeps_datagrams_with_the_address_or_port_at_either_end(client: Client) -> None:
    other = ("10.0.0.3", 6000), ("10.0.0.4", 123)
    store_batch(
        [record("send", True, A, B, "client", 10), record("send", True, *other, "ntpd", 48)]
        + [record("receive", True, other[1], other[0], "ntpd", 48)]
    )
    assert flows(client, port="53") == [("client", 1, 0, 0)]
    assert flows(client, port="5000") == [("client", 1, 0, 0)]
    assert flows(client, addr="10.0.0.4") == [("ntpd", 1, 0, 0)]
    assert flows(client, addr="10.0.0.4", port="53") == []
    assert flows(client) == [("client", 1, 0, 0), ("ntpd", 1, 0, 0)]


def test_the_filter_reads_any_written_form_and_refuses_nonsense(client: Client) -> None:
    v6 = ("fd00::1", 5353), ("fd00::2", 53)
    store_batch([record("send", True, *v6, "resolver", 30)])
    assert flows(client, addr="[fd00:0::0001]") == [("resolver", 1, 0, 0)]
    for bad in ({"addr": "10.0.0"}, {"port": "0"}, {"port": "http"}, {"port": "70000"}):
        answer = client.get("/api/dash/udp", {"host": HOST, **bad})
        assert answer.status_code == 400, bad
