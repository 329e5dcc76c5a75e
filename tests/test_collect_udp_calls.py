"""Kernel tests of udp-calls, the udp provider's always-on mode: a record for every send and
receive call on a UDP socket, with its peer, and no program on any packet. The peer of an
unconnected socket's call comes from the cgroup sock_addr hooks (kmod/udp_peer.bpf.c);
without a cgroup v2 hierarchy it is unknown (null), said as a degradation, and the skb
provider notes UDP senders at net_dev_queue instead. Counts against the namespace's
own SNMP counters."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from collector.bpf import loader
from tests.kernel_support import kernel, tracing
from tests.netns_lab import delta, netns_lab
from translators.records import SkbDrop, UdpDatagram

pytestmark = kernel

SIZES = (11, 22, 33)
PER_PACKET = {"net_dev_queue", "netif_receive_skb"}


def calls(records: list, port: int) -> list[tuple]:  # type: ignore[type-arg]
    found = [
        (r.probe, r.src, r.sport, r.dst, r.dport, r.bytes, r.hook)
        for r in records
        if isinstance(r, UdpDatagram) and port in (r.sport, r.dport)
    ]
    return sorted(found, key=str)


@pytest.mark.matrix
@pytest.mark.parametrize(
    ("family", "host", "any_addr"), [(socket.AF_INET, "127.0.0.1", "0.0.0.0"), (socket.AF_INET6, "::1", "::")]
)
def test_every_call_is_a_record_with_its_peer_and_no_program_runs_per_packet(
    family: int, host: str, any_addr: str
) -> None:
    with netns_lab() as ns, tracing(("udp-calls",), netns=ns.inode) as cap:
        loaded = set(cap.session.loaded_names())
        assert not loaded & PER_PACKET
        no_calls = "sock_send_length" in cap.session.absent  # Linux before 6.3: nothing to record
        if no_calls:
            assert {what for p, what, _ in cap.session.degraded if p == "udp-calls"} >= {
                "udp_call.send",
                "udp_call.receive",
            }
        else:
            assert loader.CGROUP_PROGRAMS <= loaded and cap.session.degraded == ()
        before = ns.counters()
        with ns.socket(family, socket.SOCK_DGRAM) as rx, ns.socket(family, socket.SOCK_DGRAM) as tx:
            rx.bind((host, 0))
            port = rx.getsockname()[1]
            for size in SIZES:
                tx.sendto(b"u" * size, (host, port))  # unconnected: the peer from the sendmsg hook
            sport = tx.getsockname()[1]
            got = [rx.recvfrom(100) for _ in SIZES]  # the peer from the recvmsg hook
            tx.connect((host, port))  # connected: the peer from the socket
            tx.send(b"c" * 44)
            unasked = rx.recv(100)  # no address asked for: the kernel gives the hook none
        after = ns.counters()
        records = cap.settle(quiet=0.5)
    assert [len(data) for data, _ in got] == list(SIZES) and len(unasked) == 44
    if no_calls:
        assert calls(records, port) == []  # said above, not made up
        return
    send, recv = "tp_btf/sock_send_length", "tp_btf/sock_recv_length"
    assert calls(records, port) == sorted(
        [("send", any_addr, sport, host, port, size, send) for size in SIZES]
        + [("receive", host, port, host, sport, size, recv) for size in SIZES]
        + [("send", host, sport, host, port, 44, send), ("receive", host, port, None, None, 44, recv)],
        key=str,
    )
    assert {r.comm for r in records if isinstance(r, UdpDatagram)} == {"python"}
    if family == socket.AF_INET:  # /proc/net/snmp has IPv4's counters only
        assert delta(before, after, "UdpOutDatagrams", "UdpInDatagrams") == {
            "UdpOutDatagrams": len(SIZES) + 1,
            "UdpInDatagrams": len(SIZES) + 1,
        }


def test_without_cgroup_v2_the_peer_is_unknown_and_said_so_and_drops_keep_their_sender(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NETTRAIL_CGROUP2", "/nonexistent-cgroup2")
    with netns_lab() as ns, tracing(("udp-calls", "skb"), netns=ns.inode) as cap:
        loaded = set(cap.session.loaded_names())
        assert "net_dev_queue" in loaded and not loaded & loader.CGROUP_PROGRAMS  # skb's fallback
        assert cap.session.degraded == (
            ("udp-calls", "dst/dport of unconnected sockets' calls", "no cgroup v2 hierarchy is mounted"),
        )
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(b"nobody", ("127.0.0.1", 9))  # a closed port: dropped inside this call
            sport = tx.getsockname()[1]
        records = cap.settle(quiet=0.5)
    assert calls(records, sport) == [("send", "0.0.0.0", sport, None, None, 6, "tp_btf/sock_send_length")]
    [drop] = [r for r in records if isinstance(r, SkbDrop)]
    assert (drop.drop_reason_str, drop.sport, drop.dport, drop.attribution, drop.comm) == (
        "NO_SOCKET", sport, 9, "owner-map", "python",
    )  # fmt: skip


@pytest.mark.matrix
def test_the_first_datagram_of_a_socket_dropped_in_its_send_keeps_its_sender() -> None:
    """On loopback a datagram to a closed port is dropped inside the send call, before
    sock_send_length: the sendmsg hook has noted the sender by its port already, under the
    socket's network namespace (this thread is in another: the lab's sockets are made
    there, used from here). Before 6.2 the net_dev_queue program does, as before."""
    with netns_lab() as ns, tracing(("skb",), netns=ns.inode) as cap:
        fallback = loader.cgroup_unusable() is not None
        assert ("net_dev_queue" in cap.session.loaded_names()) == fallback, cap.session.cgroup_why
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(b"first", ("127.0.0.1", 9))
            sport = tx.getsockname()[1]
        records = cap.settle(quiet=0.5)
    [drop] = [r for r in records if isinstance(r, SkbDrop)]
    assert (drop.drop_reason_str, drop.sport, drop.attribution, drop.comm) == (
        "NO_SOCKET",
        sport,
        "owner-map",
        "python",
    )


def test_cgroup_programs_that_will_not_attach_cost_only_the_peers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A directory that is no cgroup: the cgroup programs do not attach (EBADF here; a
    container that keeps the hierarchy's root from us says EPERM, taken the same way), which
    is said (failed) and costs the peers of unconnected calls, not the tracing."""
    monkeypatch.setenv("NETTRAIL_CGROUP2", str(tmp_path))
    with netns_lab() as ns, tracing(("udp-calls",), netns=ns.inode) as cap:
        if "sock_send_length" in cap.session.absent:
            pytest.skip("no call records before Linux 6.3")
        assert set(cap.session.failed) == set(loader.CGROUP_PROGRAMS)
        with ns.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            tx.sendto(b"still", ("127.0.0.1", 9))
            sport = tx.getsockname()[1]
        records = cap.settle(quiet=0.5)
    assert calls(records, sport) == [("send", "0.0.0.0", sport, None, None, 5, "tp_btf/sock_send_length")]
