"""Kernel tests of sampled skb lifecycles (--skb-sample N): the kernel follows one buffer
in each block of N it sees, from its first sighting to its end, and counts every buffer:
UDP over loopback (first seen when sent) and over a veth pair (first seen at the
receive entry hook, or at netif_receive_skb without the entry hooks), without sampling
(every buffer followed, the counts equal), and TCP over loopback without a filter, as
`nettrail up` runs. Sampled, the default stages are the ends (--skb-stages ends): the
receive entry and transmit stage hooks are not attached at all (bpftool's link list
says so), and a followed buffer still has its first sighting, its reader and its end;
--skb-stages all attaches and records them."""

from __future__ import annotations

import os
import socket

import pytest

from collector.bpf.loader import SKB_STAGE_PROGRAMS
from collector.health.reporter import SelfHealth
from tests.kernel_support import attached_tracepoints, bound_listener, cookie_of, kernel, lifetimes, pinned, tracing
from tests.veth_lab import veth_lab
from translators.records import SamplingReport, SkbEvent

pytestmark = kernel

UDP_STAGES = ["tx-first", "xmit-start", "xmit", "rx", "copy", "consume"]
# --skb-stages ends: no transmit start/done (and no receive entry hook)
UDP_ENDS = ["tx-first", "rx", "copy", "consume"]
IP_UDP_HEADERS = 28  # the length a received datagram's rx, copy and consume stages report: IPv4 + UDP


def send_and_read(port: int, count: int, base: int) -> None:
    """count datagrams, the i-th of base + i bytes, each read before the next is sent
    (so every lifetime ends by its read, on this CPU)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", port))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            for i in range(count):
                tx.sendto(b"s" * (base + i), ("127.0.0.1", port))
                assert len(rx.recv(4096)) == base + i


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stage_hooks(cap: object) -> set[str]:
    """The stage tracepoints (SKB_STAGE_PROGRAMS) the session's programs are attached to."""
    return attached_tracepoints(cap.session) & SKB_STAGE_PROGRAMS  # type: ignore[attr-defined]


@pytest.mark.parametrize(("stages", "expected"), [(None, UDP_ENDS), ("all", UDP_STAGES)], ids=["ends", "all"])
def test_one_in_n_buffers_is_followed_whole_and_every_buffer_is_counted(
    stages: str | None, expected: list[str]
) -> None:
    n, m, base = 8, 400, 100
    port = free_udp_port()
    reports: list[SamplingReport] = []
    with pinned(0), tracing(("skb-lifecycle",), port=port, skb_sample=n, skb_stages=stages, counts_every=0.2) as cap:
        # sampled, the default is the ends: no stage hook runs for the buffers not followed
        hooks = stage_hooks(cap)
        assert hooks == (set() if stages is None else SKB_STAGE_PROGRAMS - set(cap.session.absent)), hooks
        health = SelfHealth(cap.source, cap.source.env)
        send_and_read(port, m, base)

        def settled(recs: list) -> bool:  # type: ignore[type-arg]
            reports.extend(r for r in health.add([]) if isinstance(r, SamplingReport))
            ended = sum(1 for life in lifetimes(recs).values() if life[-1].end)
            return cap.source.skb_lifetimes == (m, m // n) and ended == m // n

        records = cap.wait_for(settled)
        reports.extend(r for r in health.add([], final=True) if isinstance(r, SamplingReport))
        seen, followed = cap.session.skb_sampling()
        live = cap.session.skb_follow_counts()
    # every followed lifetime ended, and with it its count in the kernel's cheap "followed?"
    # test: buffers not followed found it at zero and cost no lookup
    assert live == (0, 0)
    # every buffer counted exactly; all first seen on CPU 0, so one followed per block of n
    assert (seen, followed) == (m, m // n)
    lives = lifetimes(records)
    assert len(lives) == m // n
    index = {}
    rx = expected.index("rx")
    for uid, life in lives.items():
        # complete: from the first sighting at the sender's device to the reader's consume
        # (with the ends only: start, receive, reader and end, nothing made up between)
        assert [r.stage for r in life] == expected, [(r.stage, r.len) for r in life]
        assert life[-1].end == "consumed" and all(r.end is None for r in life[:-1])
        assert len({r.len for r in life[rx:]}) == 1
        index[uid] = life[rx].len - IP_UDP_HEADERS - base  # which datagram: its payload size
    assert sorted(index.values()) == sorted(set(index.values()))
    # exactly one followed in each block of n consecutive buffers, at a place drawn per block
    assert sorted(i // n for i in index.values()) == list(range(m // n))
    assert len({i % n for i in index.values()}) > 1
    # the collector's H2 reports carry the same exact counts
    assert {(r.event_type, r.setting) for r in reports} == {("skb_event", f"skb-sample {n}")}
    assert (sum(r.observed for r in reports), sum(r.emitted for r in reports)) == (m, m // n)


def test_without_sampling_every_buffer_is_followed_and_the_counts_agree() -> None:
    m = 40
    port = free_udp_port()
    with pinned(0), tracing(("skb-lifecycle",), port=port, counts_every=0.2) as cap:
        # every buffer followed: every stage, full tracing as before --skb-stages
        assert stage_hooks(cap) == SKB_STAGE_PROGRAMS - set(cap.session.absent)
        send_and_read(port, m, 50)
        records = cap.wait_for(lambda recs: sum(1 for life in lifetimes(recs).values() if life[-1].end) == m)
        counts = cap.session.skb_sampling()
        live = cap.session.skb_follow_counts()
    assert counts == (m, m)
    assert live == (0, 0)
    assert [[r.stage for r in life] for life in lifetimes(records).values()] == [UDP_STAGES] * m


VETH_ALL = [
    ("rx-first", "tp_btf/netif_rx_entry"),
    ("rx", "tp_btf/netif_receive_skb"),
    ("copy", "tp_btf/sock_recv_length"),
    ("consume", "tp_btf/sock_recv_length"),
]
VETH_ENDS = [
    ("rx-first", "tp_btf/netif_receive_skb"),
    ("copy", "tp_btf/sock_recv_length"),
    ("consume", "tp_btf/sock_recv_length"),
]


@pytest.mark.parametrize(("stages", "expected"), [("all", VETH_ALL), (None, VETH_ENDS)], ids=["all", "ends"])
def test_received_buffers_are_chosen_once_at_their_first_receive_hook_on_veth(
    stages: str | None, expected: list[tuple[str, str]]
) -> None:
    # All stages: the lifetimes start in namespace B at netif_rx_entry (veth without
    # GRO); the skip slot makes netif_receive_skb the same lifetime, so each datagram
    # counts once. The ends only (sampled's default): no entry hook is attached, they
    # start at netif_receive_skb, counted once each all the same.
    n, m, base = 8, 64, 200
    with veth_lab(False) as lab:
        rx = lab.socket(lab.b, socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind((lab.addr_b, 0))
        port = rx.getsockname()[1]
        reader = cookie_of(rx)
        tx = lab.socket(lab.a, socket.AF_INET, socket.SOCK_DGRAM)
        with (
            pinned(0),
            tracing(("skb-lifecycle",), netns=lab.netns_b, port=port, skb_sample=n, skb_stages=stages) as cap,
        ):
            assert stage_hooks(cap) == (set() if stages is None else SKB_STAGE_PROGRAMS - set(cap.session.absent))
            for i in range(m):
                tx.sendto(b"v" * (base + i), (lab.addr_b, port))
                assert len(rx.recv(4096)) == base + i
            records = cap.wait_for(lambda recs: cap.session.skb_sampling() == (m, m // n) and sum(
                1 for life in lifetimes(recs).values() if life[-1].end) == m // n)  # fmt: skip
            counts = cap.session.skb_sampling()
        tx.close()
        rx.close()
    assert counts == (m, m // n)
    lives = lifetimes(records)
    assert [[(r.stage, r.hook) for r in life] for life in lives.values()] == [expected] * (m // n)
    # first seen without a socket, each is tied to its reader at the read and ends there
    assert {(life[0].sock_cookie, life[-2].sock_cookie, life[-1].sock_cookie) for life in lives.values()} == {
        (None, reader, reader)
    }
    assert all(life[-1].end == "consumed" and all(r.end is None for r in life[:-1]) for life in lives.values())
    index = sorted(life[-1].len - IP_UDP_HEADERS - base for life in lives.values())
    assert [i // n for i in index] == list(range(m // n))  # one followed in each block of n


@pytest.mark.matrix
def test_without_a_filter_loopback_tcp_segments_are_followed_whole_from_their_send() -> None:
    # nettrail up's mode: no filter, so the choice comes before any parsing, among every
    # buffer this CPU sends (other traffic on the machine included). On loopback a lifetime
    # starts only at the send: the receive of a buffer not followed starts none. The
    # stages are the ends (sampled's default): no transmit start/done hook is attached.
    n, m = 4, 120
    lst = bound_listener()
    port = lst.getsockname()[1]
    with pinned(0), tracing(("skb-lifecycle",), skb_sample=n, ringbuf=1 << 24) as cap:
        assert not set(cap.session.program_ids()) & SKB_STAGE_PROGRAMS
        # before 6.3 (no sock_recv_length) a read buffer's last stage is its copy, and its
        # lifetime ends last-seen when its address is used again
        whole = ["tx-first", "rx", "copy"]
        ends = [["last-seen"], []] if cap.lost("skb-lifecycle", "skb_lifecycle.read") else [["consume"]]
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server, _ = lst.accept()
        for i in range(m):  # one segment each, read whole before the next is sent
            client.sendall(b"t" * (100 + i))
            got = b""
            while len(got) < 100 + i:
                got += server.recv(5000)

        def ours(recs: list) -> list[list[SkbEvent]]:  # type: ignore[type-arg]
            return [life for life in lifetimes(recs).values() if port in (life[0].sport, life[0].dport)]

        def data(recs: list) -> list[list[SkbEvent]]:  # type: ignore[type-arg]
            return [life for life in ours(recs) if any(r.stage == "copy" for r in life)]

        records = cap.wait_for(lambda recs: len(data(recs)) >= 2 and all(len(life) > len(whole) for life in data(recs)))
        seen, followed = cap.session.skb_sampling()
        client.close()
        server.close()
        lst.close()
    # one in each block of n lifetimes started on a CPU: a partly filled block per CPU
    cpus = os.cpu_count() or 1
    assert seen // n - cpus <= followed <= seen // n + cpus, (seen, followed)
    assert {life[0].stage for life in ours(records)} == {"tx-first"}
    assert {life[0].hook for life in ours(records)} == {"tp_btf/net_dev_queue"}
    followed_data = data(records)
    assert [[r.stage for r in life][: len(whole)] for life in followed_data] == [whole] * len(followed_data)
    assert all([r.stage for r in life][len(whole) :] in ends for life in followed_data), followed_data
    sizes = [life[2].len for life in followed_data]  # each its own segment, copied whole
    assert len(set(sizes)) == len(sizes) and all(100 <= size < 100 + m for size in sizes)
