"""Kernel tests of received skb lifecycles first seen at netif_receive_skb_entry: packets
written to a tun device (tests/tun_lab.py) are received through netif_receive_skb() in
the writer's own system call, the one path on this kernel that fires that tracepoint
(veth fires napi_gro_receive_entry or netif_rx_entry: tests/test_collect_skb_veth.py).
Keep the expected stages in sync with docs/collector.md, "skb lifecycles"."""

from __future__ import annotations

import os
import socket

from tests.kernel_support import cookie_of, kernel, lifetimes, pinned, tracing
from tests.packets import ACK, PSH, SYN, tcp, udp
from tests.tun_lab import LOCAL, PEER, tun_lab
from translators.records import SkbEvent, connection_uuid

pytestmark = kernel

ENTRY = "tp_btf/netif_receive_skb_entry"
RX = "tp_btf/netif_receive_skb"
RECV = "tp_btf/sock_recv_length"
INFERRED = ["ts_ns", "since_prev_ns", "since_first_ns"]


def stages(life: list[SkbEvent]) -> list[tuple[str | None, str | None, str | None]]:
    return [(r.stage, r.hook, r.end) for r in life]


def consumes(n: int):  # type: ignore[no-untyped-def]
    return lambda recs: sum(1 for r in recs if isinstance(r, SkbEvent) and r.hook == RECV and r.end) >= n


def assert_written_by_this_process(life: list[SkbEvent]) -> None:
    """The tun write runs the receive in our system call: task context, no socket owner
    yet, so the current task (the writer) is the attribution."""
    assert {(r.ctx, r.tgid, r.attribution) for r in life} == {("task", os.getpid(), "current")}


def test_udp_datagrams_written_to_a_tun_device_start_at_netif_receive_skb_entry() -> None:
    with tun_lab() as lab:
        rx = lab.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind((LOCAL, 0))
        port = rx.getsockname()[1]
        with pinned(0), tracing(("skb-lifecycle",), netns=lab.netns, port=port) as cap:
            for i in range(3):
                lab.inject(udp(PEER, 40000 + i, LOCAL, port, bytes([65 + i]) * 200))
            rx.settimeout(5)
            assert [rx.recv(1000) for _ in range(3)] == [bytes([65 + i]) * 200 for i in range(3)]
            records = cap.wait_for(consumes(3))
            cookie = cookie_of(rx)
            rx.close()
    lives = list(lifetimes(records).values())
    assert [stages(life) for life in lives] == [
        [("rx-first", ENTRY, None), ("rx", RX, None), ("copy", RECV, None), ("consume", RECV, "consumed")]
    ] * 3
    uuid = connection_uuid("test-host", "test-boot", cookie)
    for i, life in enumerate(lives):
        assert [(r.src, r.sport, r.dst, r.dport) for r in life] == [(PEER, 40000 + i, LOCAL, port)] * 4
        assert [r.len for r in life] == [228] * 4  # IPv4 + UDP headers + 200 bytes
        assert [r.ts_ns for r in life] == sorted(r.ts_ns for r in life)
        assert len({r.skb_uid for r in life}) == 1
        # first seen before any socket; tied to the reader's connection at its recv
        assert [(r.sock_cookie, r.conn_uuid) for r in life] == [(None, None)] * 2 + [(cookie, uuid)] * 2
        assert [r.approx for r in life] == [[], [], INFERRED, INFERRED]
        assert {r.netns for r in life} == {lab.netns}
        assert_written_by_this_process(life)


def test_a_tcp_segment_written_to_a_tun_device_is_followed_to_its_reader_connection() -> None:
    with tun_lab() as lab:
        lst = lab.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.bind((LOCAL, 0))
        port = lst.getsockname()[1]
        lst.listen()
        with pinned(0), tracing(("skb-lifecycle",), netns=lab.netns, port=port) as cap:
            # this process is the peer: a handshake and one data segment through the tun
            lab.inject(tcp(PEER, 40100, LOCAL, port, 1000, 0, SYN))
            isn, _ = lab.syn_ack_to(40100)
            lab.inject(tcp(PEER, 40100, LOCAL, port, 1001, isn + 1, ACK))
            server, _ = lst.accept()
            lab.inject(tcp(PEER, 40100, LOCAL, port, 1001, isn + 1, ACK | PSH, b"T" * 1000))
            server.settimeout(5)
            assert server.recv(5000) == b"T" * 1000
            records = cap.wait_for(consumes(1))
            cookie = cookie_of(server)
            server.close()
            lst.close()
    lives = list(lifetimes(records).values())
    received = [life for life in lives if life[0].src == PEER]
    # every segment the peer wrote starts at the entry hook, then netif_receive_skb
    assert [stages(life)[:2] for life in received] == [[("rx-first", ENTRY, None), ("rx", RX, None)]] * 3
    syn, data = received[0], received[2]
    assert stages(syn)[2:] == [("consume", "tp_btf/consume_skb", "consumed")]  # the listener consumed it
    assert stages(data) == [
        ("rx-first", ENTRY, None),
        ("rx", RX, None),
        ("copy", "tp_btf/skb_copy_datagram_iovec", None),
        ("consume", RECV, "consumed"),
    ]
    assert [r.ts_ns for r in data] == sorted(r.ts_ns for r in data)
    assert [r.len for r in data] == [1040, 1040, 1000, 1000]  # copy and consume count payload bytes
    uuid = connection_uuid("test-host", "test-boot", cookie)
    assert [(r.sock_cookie, r.conn_uuid) for r in data] == [(None, None)] * 2 + [(cookie, uuid)] * 2
    assert [(r.src, r.sport, r.dst, r.dport) for r in data] == [(PEER, 40100, LOCAL, port)] * 4
    assert_written_by_this_process(data)
    # the SYN-ACK leaves through the tun and is copied to this process by its read()
    [synack] = [life for life in lives if life[0].src == LOCAL and life[0].sock_cookie is None]
    assert stages(synack) == [
        ("tx-first", "tp_btf/net_dev_queue", None),
        ("xmit-start", "tp_btf/net_dev_start_xmit", None),
        ("xmit", "tp_btf/net_dev_xmit", None),
        ("copy", "tp_btf/skb_copy_datagram_iovec", None),
        ("consume", "tp_btf/consume_skb", "consumed"),
    ]
    assert synack[2].rc == 0  # tun_net_xmit took it (NETDEV_TX_OK)
