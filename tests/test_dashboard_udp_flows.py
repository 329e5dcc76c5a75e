"""The UDP page's flows (webapp/dashboard/udp_flows.py): each datagram counted once however
many views recorded it (the sender's and receiver's devices, the send and receive calls),
a receive call turned round into the datagram's direction."""

from __future__ import annotations

import itertools

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from translators.records import UdpDatagram
from webapp.traces.models import Host
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db

HOST, A, B = "udp-host", ("10.0.0.1", 5000), ("10.0.0.2", 53)
_seq = itertools.count(1)
HOOK = {
    ("send", False): "tp_btf/net_dev_queue",
    ("receive", False): "tp_btf/netif_receive_skb",
    ("send", True): "tp_btf/sock_send_length",
    ("receive", True): "tp_btf/sock_recv_length",
}


def record(
    probe: str, call: bool, local: tuple[str, int], remote: tuple[str, int] | None, comm: str, size: int,
    hook: str | None = None,
):  # fmt: skip
    """A datagram record as translators/udp.py makes it: device records source first,
    call records local first (an unknown peer null)."""
    src, dst = (local, remote) if call or probe == "send" else (remote, local)
    seq = next(_seq)
    return UdpDatagram(
        host_id=HOST, boot_id="b", seq=seq, ts_ns=seq, ts_wall=1_700_000_000.0 + seq, provider="udp", probe=probe,
        hook=hook or HOOK[(probe, call)], src=src[0] if src else None, sport=src[1] if src else None,
        dst=dst[0] if dst else None, dport=dst[1] if dst else None, comm=comm,
        **({"bytes": size} if call else {"length": size + 8, "payload_length": size}),
    )  # fmt: skip


@pytest.fixture()
def client() -> Client:
    Host.objects.create(name=HOST)
    c = Client()
    c.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    return c


def rows(client: Client) -> list[tuple]:  # type: ignore[type-arg]
    flows = client.get("/api/dash/udp", {"host": HOST}).json()["flows"]
    return sorted(
        ((f["src"], f["sport"], f["dst"], f["dport"], f["comm"], f["datagrams"], f["bytes"]) for f in flows), key=str
    )


def test_a_datagram_seen_at_both_devices_and_both_calls_counts_once_per_process(client: Client) -> None:
    batch = []
    for size in (100, 200, 300):  # A's client sends to B's server on this one host (loopback)
        batch += [
            record("send", True, A, B, "client", size),
            record("send", False, A, B, "client", size),
            record("receive", False, B, A, "client", size),  # attributed by the port's owner
            record("receive", True, B, A, "server", size),  # local first: turned round
        ]
    store_batch(batch)
    assert rows(client) == [("10.0.0.1", 5000, "10.0.0.2", 53, "client", 3, 600), ("10.0.0.1", 5000, "10.0.0.2", 53, "server", 3, 600)]  # fmt: skip


def test_calls_alone_and_a_receive_without_its_peer(client: Client) -> None:
    store_batch([
        record("send", True, A, B, "client", 10),
        record("send", True, A, B, "client", 20),
        record("receive", True, B, None, "server", 10),  # recv() asked for no address
    ])  # fmt: skip
    assert rows(client) == sorted(
        [("10.0.0.1", 5000, "10.0.0.2", 53, "client", 2, 30), (None, None, "10.0.0.2", 53, "server", 1, 10)],
        key=str,
    )


def test_more_sent_than_received_shows_the_sends(client: Client) -> None:
    store_batch(
        [record("send", False, A, B, "client", 50) for _ in range(4)]
        + [record("receive", False, B, A, "client", 50) for _ in range(1)]  # three lost on the way
    )
    assert rows(client) == [("10.0.0.1", 5000, "10.0.0.2", 53, "client", 4, 200)]


def test_an_unbound_senders_calls_join_the_devices_row_that_names_its_address(client: Client) -> None:
    unbound = ("0.0.0.0", 5000)
    store_batch(
        [record("send", True, unbound, B, "client", 70) for _ in range(2)]  # the call: local 0.0.0.0
        + [record("send", False, A, B, "client", 70) for _ in range(2)]  # the device: the route's source
        + [record("send", True, unbound, ("10.0.0.9", 53), "client", 5)]  # no device row to join
    )
    assert rows(client) == sorted(
        [("10.0.0.1", 5000, "10.0.0.2", 53, "client", 2, 140), ("0.0.0.0", 5000, "10.0.0.9", 53, "client", 1, 5)],
        key=str,
    )


def test_calls_from_the_system_calls_read_as_calls_before_linux_6_3(client: Client) -> None:
    """Before 6.3 the calls are seen at the system calls' exits: a receive is still turned round."""
    exit_of = "tp_btf/sys_exit:{}".format
    store_batch([
        record("send", True, A, B, "client", 10, exit_of("sendto")),
        record("send", True, A, B, "client", 20, exit_of("sendmmsg")),
        record("receive", True, B, A, "server", 10, exit_of("recvfrom")),
        record("receive", True, B, A, "server", 20, exit_of("recvmsg")),
    ])  # fmt: skip
    assert rows(client) == sorted(
        [("10.0.0.1", 5000, "10.0.0.2", 53, "client", 2, 30), ("10.0.0.1", 5000, "10.0.0.2", 53, "server", 2, 30)],
        key=str,
    )
