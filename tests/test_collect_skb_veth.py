"""Kernel tests of received skb lifecycles on a veth pair between two namespaces: the
lifetime starts at the receive entry hook that fires first (napi_gro_receive_entry with
GRO, netif_rx_entry without) and is tied to the reading socket's connection."""

from __future__ import annotations

import socket
import time

import pytest

from tests.kernel_support import cookie_of, kernel, lifetimes, pinned, tracing
from tests.veth_lab import veth_lab
from translators.records import SkbEvent, connection_uuid

pytestmark = kernel

ENTRY_HOOK = {True: "tp_btf/napi_gro_receive_entry", False: "tp_btf/netif_rx_entry"}


def consumed(records: list) -> bool:  # type: ignore[type-arg]
    return any(r.stage == "consume" for r in records if isinstance(r, SkbEvent))


@pytest.mark.parametrize("gro", [True, False], ids=["gro-on", "gro-off"])
def test_a_tcp_segment_received_on_veth_starts_at_the_first_receive_entry_hook(gro: bool) -> None:
    with veth_lab(gro) as lab:
        lst = lab.socket(lab.b, socket.AF_INET, socket.SOCK_STREAM)
        lst.bind((lab.addr_b, 0))
        port = lst.getsockname()[1]
        lst.listen()
        with pinned(0), tracing(("skb-lifecycle",), netns=lab.netns_b, port=port) as cap:
            client = lab.socket(lab.a, socket.AF_INET, socket.SOCK_STREAM)
            client.connect((lab.addr_b, port))
            server, _ = lst.accept()
            client.sendall(b"V" * 1000)
            time.sleep(0.05)
            assert server.recv(5000) == b"V" * 1000
            records = cap.wait_for(consumed)
            cookie = cookie_of(server)
            for s in (client, server, lst):
                s.close()
    copied = [life for life in lifetimes(records).values() if any(r.stage == "copy" for r in life)]
    assert len(copied) == 1, [[(r.stage, r.hook) for r in life] for life in lifetimes(records).values()]
    [data] = copied
    assert [(r.stage, r.hook) for r in data] == [
        ("rx-first", ENTRY_HOOK[gro]),
        ("rx", "tp_btf/netif_receive_skb"),
        ("copy", "tp_btf/skb_copy_datagram_iovec"),
        ("consume", "tp_btf/sock_recv_length"),
    ]
    assert [r.ts_ns for r in data] == sorted(r.ts_ns for r in data)
    assert all(r.netns == lab.netns_b for r in data)
    first = data[0]
    # first seen before any socket: the packet's 4-tuple, then tied to the reader
    assert (first.src, first.dst, first.dport, first.sock_cookie) == (lab.addr_a, lab.addr_b, port, None)
    assert [r.sock_cookie for r in data[2:]] == [cookie, cookie]
    assert data[3].conn_uuid == connection_uuid("test-host", "test-boot", cookie)
    assert data[3].end == "consumed"


@pytest.mark.parametrize("gro", [True, False], ids=["gro-on", "gro-off"])
def test_a_udp_datagram_received_on_veth_is_followed_to_its_consume(gro: bool) -> None:
    with veth_lab(gro) as lab:
        rx = lab.socket(lab.b, socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind((lab.addr_b, 0))
        port = rx.getsockname()[1]
        with pinned(0), tracing(("skb-lifecycle",), netns=lab.netns_b, port=port) as cap:
            tx = lab.socket(lab.a, socket.AF_INET, socket.SOCK_DGRAM)
            tx.sendto(b"d" * 200, (lab.addr_b, port))
            rx.settimeout(5)
            assert rx.recv(1000) == b"d" * 200
            records = cap.wait_for(consumed)
            cookie = cookie_of(rx)
            tx.close()
            rx.close()
    lives = lifetimes(records)
    assert len(lives) == 1, [[(r.stage, r.hook) for r in life] for life in lives.values()]
    [data] = lives.values()
    assert [(r.stage, r.hook, r.end) for r in data] == [
        ("rx-first", ENTRY_HOOK[gro], None),
        ("rx", "tp_btf/netif_receive_skb", None),
        ("copy", "tp_btf/sock_recv_length", None),
        ("consume", "tp_btf/sock_recv_length", "consumed"),
    ]
    assert [r.len for r in data] == [228] * 4
    assert [r.sock_cookie for r in data] == [None, None, cookie, cookie]
