"""Kernel tests of skb lifecycles: stages of one buffer in time order, generations keeping reused addresses apart."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

from tests.kernel_support import bound_listener, cookie_of, kernel, lifetimes, pinned, tracing
from translators.records import SkbEvent

pytestmark = kernel


def test_a_tcp_data_segment_is_followed_from_send_through_receive_and_copy_to_its_consume() -> None:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with pinned(0), tracing(("skb-lifecycle",), port=port) as cap:
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = lst.accept()
        cookie, lport = cookie_of(client), client.getsockname()[1]
        client.sendall(b"L" * 1000)
        time.sleep(0.05)  # one segment, then one read of it
        assert server.recv(5000) == b"L" * 1000
        records = cap.wait_for(lambda recs: any(r.stage == "consume" for r in recs if isinstance(r, SkbEvent)))
        client.close()
        server.close()
        lst.close()
    lives = lifetimes(records)
    copied = [life for life in lives.values() if any(r.stage == "copy" for r in life)]
    assert len(copied) == 1, [[(r.stage, r.len, r.skb_gen) for r in life] for life in lives.values()]
    [data] = copied
    assert [r.stage for r in data] == ["tx-first", "xmit-start", "xmit", "rx", "copy", "consume"], [
        (r.stage, r.len) for r in data
    ]
    assert [r.ts_ns for r in data] == sorted(r.ts_ns for r in data)
    assert [r.since_first_ns for r in data] == sorted(r.since_first_ns or 0 for r in data)
    assert len({(r.skb_uid, r.skb_gen) for r in data}) == 1
    first, copy = data[0], data[4]
    assert (first.sock_cookie, first.sport, first.dport, first.hook) == (cookie, lport, port, "tp_btf/net_dev_queue")
    assert copy.len == 1000 and copy.hook == "tp_btf/skb_copy_datagram_iovec"
    assert data[2].rc == 0  # net_dev_xmit: the loopback driver took it
    # TCP frees a read buffer without a tracepoint (skb_attempt_defer_free on the allocating
    # CPU): the consume is inferred at the recvmsg's return, marked approximate in time
    consume = data[5]
    assert [r.end for r in data] == [None] * 5 + ["consumed"]
    assert (consume.hook, consume.len, consume.approx) == (
        "tp_btf/sock_recv_length",
        1000,
        ["ts_ns", "since_prev_ns", "since_first_ns"],
    )
    assert consume.conn_uuid == first.conn_uuid and consume.sock_cookie == cookie
    assert all(r.approx == [] for r in data[:5])


def test_a_partly_read_tcp_segment_is_consumed_only_by_the_read_that_empties_it() -> None:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with pinned(0), tracing(("skb-lifecycle",), port=port) as cap:
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        server, _ = lst.accept()
        client.sendall(b"P" * 1000)
        time.sleep(0.05)
        assert server.recv(1000, socket.MSG_PEEK) == b"P" * 1000  # a peek consumes nothing
        assert server.recv(600) == b"P" * 600
        assert server.recv(5000) == b"P" * 400
        records = cap.wait_for(lambda recs: any(r.stage == "consume" for r in recs if isinstance(r, SkbEvent)))
        client.close()
        server.close()
        lst.close()
    [data] = [life for life in lifetimes(records).values() if any(r.stage == "copy" for r in life)]
    assert [(r.stage, r.end) for r in data][3:] == [
        ("rx", None),
        ("copy", None),
        ("copy", None),
        ("copy", None),
        ("consume", "consumed"),
    ]
    assert [r.rc for r in data if r.stage == "copy"] == [None, None, None]  # rc is xmit's only
    assert [r.ts_ns for r in data] == sorted(r.ts_ns for r in data)


def test_a_udp_datagram_is_followed_from_send_through_receive_to_an_inferred_copy_and_consume() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        port = rx.getsockname()[1]
        with pinned(0), tracing(("skb-lifecycle",), port=port) as cap:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                tx.sendto(b"u" * 300, ("127.0.0.1", port))
                sport = tx.getsockname()[1]
                assert rx.recv(1000, socket.MSG_PEEK) == b"u" * 300  # a peek consumes nothing
                assert rx.recv(1000) == b"u" * 300
                records = cap.wait_for(lambda recs: any(r.stage == "consume" for r in recs if isinstance(r, SkbEvent)))
    lives = lifetimes(records)
    assert len(lives) == 1, [[(r.stage, r.len) for r in life] for life in lives.values()]
    [data] = lives.values()
    # a linear datagram is copied without skb_copy_datagram_iovec and freed without
    # consume_skb: both stages are inferred at the recvmsg's sock_recv_length
    assert [(r.stage, r.hook, r.end) for r in data] == [
        ("tx-first", "tp_btf/net_dev_queue", None),
        ("xmit-start", "tp_btf/net_dev_start_xmit", None),
        ("xmit", "tp_btf/net_dev_xmit", None),
        ("rx", "tp_btf/netif_receive_skb", None),
        ("copy", "tp_btf/sock_recv_length", None),
        ("consume", "tp_btf/sock_recv_length", "consumed"),
    ]
    assert [r.ts_ns for r in data] == sorted(r.ts_ns for r in data)
    assert all((r.sport, r.dport) == (sport, port) for r in data)
    assert [r.len for r in data][4:] == [328, 328]  # the IPv4 datagram as received
    assert data[4].approx == data[5].approx == ["ts_ns", "since_prev_ns", "since_first_ns"]


def test_generations_keep_the_lifetimes_of_a_reused_address_apart() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        port = rx.getsockname()[1]
        with pinned(0), tracing(("skb-lifecycle",), port=port) as cap:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                for _ in range(200):  # the slab hands the same sk_buff addresses out again
                    tx.sendto(b"g" * 100, ("127.0.0.1", port))
                    assert rx.recv(1000) == b"g" * 100
            records = cap.wait_for(lambda recs: len(lifetimes(recs)) >= 200)
    lives = lifetimes(records)
    assert len(lives) == 200  # one lifetime per datagram, never two merged
    for life in lives.values():
        assert [r.stage for r in life][:4] == ["tx-first", "xmit-start", "xmit", "rx"]
        assert len({r.skb_gen for r in life}) == 1
        assert sum(r.stage == "tx-first" for r in life) == 1
    assert max(life[0].skb_gen or 0 for life in lives.values()) >= 2  # addresses were reused
    # each lifetime of a reused address ends once, by its own read
    assert [[r.stage for r in life][4:] for life in lives.values()] == [["copy", "consume"]] * 200
    assert all(life[-1].end == "consumed" for life in lives.values())


def read_lives(records: list) -> list[list[SkbEvent]]:  # type: ignore[type-arg]
    """The lifetimes of the 1000-byte TCP segment and the 200-byte datagram, once both were seen."""
    lives = lifetimes(records).values()
    tcp = [life for life in lives if any(r.stage == "copy" and r.len == 1000 for r in life)]
    udp = [life for life in lives if any(r.stage == "rx" and r.len == 228 for r in life)]
    return tcp + udp if len(tcp) == len(udp) == 1 else [[]]


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs: the buffer is read on another than its own")
def test_buffers_read_on_another_cpu_end_with_the_real_consume_of_the_deferred_free() -> None:
    # skb_attempt_defer_free hands a buffer read on another CPU back to the CPU that
    # allocated it, whose next receive softirq frees it through napi_consume_skb: there
    # the kernel does fire consume_skb, so no consume is inferred
    lst = bound_listener()
    port = lst.getsockname()[1]
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as urx,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as utx,
    ):
        urx.bind(("127.0.0.1", port))  # the same port number: one filter keeps both flows
        with tracing(("skb-lifecycle",), port=port) as cap:
            lst.listen()
            client = socket.create_connection(("127.0.0.1", port))
            server, _ = lst.accept()
            read, errors = threading.Event(), []

            def sender() -> None:
                with pinned(0):
                    client.sendall(b"T" * 1000)
                    utx.sendto(b"U" * 200, ("127.0.0.1", port))
                    read.wait(5)
                    utx.sendto(b"k", ("127.0.0.1", port))  # a receive softirq on CPU 0 flushes its deferred frees

            def reader() -> None:
                with pinned(1):
                    try:
                        time.sleep(0.05)
                        assert server.recv(5000) == b"T" * 1000
                        assert urx.recv(1000) == b"U" * 200
                    except BaseException as exc:
                        errors.append(exc)
                    read.set()

            threads = [threading.Thread(target=sender), threading.Thread(target=reader)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(10)
            assert not errors, errors
            records = cap.wait_for(lambda recs: all(life and life[-1].stage == "consume" for life in read_lives(recs)))
            client.close()
            server.close()
        lst.close()
    lives = lifetimes(records)
    tcp = [life for life in lives.values() if any(r.stage == "copy" and r.len == 1000 for r in life)]
    udp = [life for life in lives.values() if any(r.stage == "rx" and r.len == 228 for r in life)]
    assert len(tcp) == len(udp) == 1, [[(r.stage, r.len) for r in life] for life in lives.values()]
    assert read_lives(records) == tcp + udp
    assert [(r.stage, r.hook, r.end) for r in tcp[0]][3:] == [
        ("rx", "tp_btf/netif_receive_skb", None),
        ("copy", "tp_btf/skb_copy_datagram_iovec", None),
        ("consume", "tp_btf/consume_skb", "consumed"),
    ]
    assert [(r.stage, r.hook, r.end) for r in udp[0]][3:] == [
        ("rx", "tp_btf/netif_receive_skb", None),
        ("copy", "tp_btf/sock_recv_length", None),
        ("consume", "tp_btf/consume_skb", "consumed"),
    ]
    for life in tcp + udp:
        assert life[-1].approx == [] and life[-1].cpu == 0  # freed on the allocating CPU
        assert [r.ts_ns for r in life] == sorted(r.ts_ns for r in life)
