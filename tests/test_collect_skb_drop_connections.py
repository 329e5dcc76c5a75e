"""Kernel tests: drops carry the connection of their socket (conn_uuid), so the webapp can
show a connection's drops and a drop's connection: a sent datagram dropped on output
(skb->sk, the sender) and a received one refused by a full receive queue (rx_sk, the
receiver)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.kernel_support import cookie_of, kernel, tracing
from translators.records import SkbDrop, connection_uuid

pytestmark = kernel


def drops(records: list, reason: str) -> list[SkbDrop]:  # type: ignore[type-arg]
    return [r for r in records if isinstance(r, SkbDrop) and r.drop_reason_str == reason]


@pytest.fixture
def nft_drop_output() -> Iterator[Callable[[int], None]]:
    table = f"nettrail_skbconn_test_{os.getpid()}"

    def make(port: int) -> None:
        rules = f"table inet {table} {{\n chain out {{\n type filter hook output priority 0;\n udp dport {port} drop\n }}\n}}\n"
        subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)

    yield make
    subprocess.run(["nft", "delete", "table", "inet", table], check=False)


def test_a_sent_datagram_dropped_on_output_carries_the_senders_connection(
    nft_drop_output: Callable[[int], None],
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        port = rx.getsockname()[1]
        nft_drop_output(port)
        with tracing(("skb",), port=port) as cap:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                tx.connect(("127.0.0.1", port))
                cookie = cookie_of(tx)
                for _ in range(3):
                    with pytest.raises(PermissionError):  # the output hook refuses it in the sender's call
                        tx.send(b"out")
                records = cap.wait_for(lambda recs: len(drops(recs, "NETFILTER_DROP")) >= 3)
    got = drops(records, "NETFILTER_DROP")
    assert len(got) == 3
    assert {(r.sock_cookie, r.conn_uuid, r.pid, r.ctx) for r in got} == {
        (cookie, connection_uuid("test-host", "test-boot", cookie), os.getpid(), "task")
    }


def test_a_datagram_refused_by_a_full_receive_queue_carries_the_receivers_connection() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        rx.bind(("127.0.0.1", 0))
        port = rx.getsockname()[1]
        cookie = cookie_of(rx)
        with tracing(("skb",), port=port) as cap:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
                for _ in range(30):  # the reader sleeps: most cannot be queued
                    tx.sendto(b"q" * 1000, ("127.0.0.1", port))
            records = cap.wait_for(lambda recs: len(drops(recs, "SOCKET_RCVBUFF")) >= 5)
    got = drops(records, "SOCKET_RCVBUFF")
    assert got and {(r.sock_cookie, r.conn_uuid) for r in got} == {
        (cookie, connection_uuid("test-host", "test-boot", cookie))
    }


@pytest.mark.parametrize("softirq_hooks", [False, True], ids=["preempt count", "softirq hooks"])
def test_a_send_right_after_attaching_is_the_senders_task(
    nft_drop_output: Callable[[int], None], softirq_hooks: bool
) -> None:
    """The context is right from the first event after attaching, whether in_task() reads
    the preempt count (no state of its own) or the softirq words. For the words,
    softirq_exit is attached before softirq_entry, and a re-attach starts from cleared
    words: the other way round, a softirq that began between the two attaches (or whose
    exit came after a detach) left its CPU marked 'softirq' until its next softirq ended,
    and a send right after attaching was recorded with ctx softirq and no pid (16 of 400
    fresh sessions here, 443 of 1,000 re-attaches, and one CI run)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", 0))
        port = rx.getsockname()[1]
        nft_drop_output(port)
        got: list[SkbDrop] = []
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.connect(("127.0.0.1", port))
            for _ in range(100):  # fresh sessions
                with tracing(("skb",), port=port, softirq_hooks=softirq_hooks) as cap:
                    with pytest.raises(PermissionError):
                        tx.send(b"out")
                    got += drops(cap.wait_for(lambda recs: bool(drops(recs, "NETFILTER_DROP"))), "NETFILTER_DROP")
            with tracing(("skb",), port=port, softirq_hooks=softirq_hooks) as cap:
                assert {"softirq_entry", "softirq_exit"} <= set(cap.session.links) or not softirq_hooks
                for _ in range(200):  # one session, re-attached
                    cap.session.detach()
                    cap.session.attach_programs()
                    with pytest.raises(PermissionError):
                        tx.send(b"out")
                got += drops(cap.wait_for(lambda recs: len(drops(recs, "NETFILTER_DROP")) >= 200), "NETFILTER_DROP")
    assert len(got) == 300
    assert {(r.ctx, r.pid) for r in got} == {("task", os.getpid())}
