"""Kernel test: under a storm into a tiny ring buffer, events received + lost = events generated."""

from __future__ import annotations

import socket

from tests.kernel_support import bound_listener, kernel, tracing
from translators.records import LossReport

pytestmark = kernel


def test_a_storm_into_a_one_page_ring_loses_events_and_the_counts_add_up() -> None:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with tracing(("tcp", "siftr"), ringbuf=4096, port=port) as cap:
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server, _ = lst.accept()
        for _ in range(300):  # nobody reads the ring meanwhile: ~600 samples for ~14 slots
            client.sendall(b"m" * 100)
            server.recv(100)
        client.close()
        server.close()
        lst.close()
        records = cap.wait_for(lambda recs: False, timeout=0.5)
        counters = cap.session.counters().sum(axis=0)  # read after the drain: nothing is in flight
        source = cap.source

    generated, lost = counters[0], counters[1]
    received = source.received
    assert lost.sum() > 0 and received.sum() > 0
    assert (received + lost == generated).all(), (received, lost, generated)
    reports = [r for r in records if isinstance(r, LossReport)]
    siftr = [r for r in reports if r.event_type == "siftr_sample"]
    assert siftr and siftr[-1].lost_total == lost[6]
    assert sum(r.lost for r in siftr) == lost[6]
    assert siftr[-1].per_cpu is not None and sum(siftr[-1].per_cpu) == lost[6]
    assert source.totals.summary().startswith(f"events received {received.sum()}, lost {lost.sum()}")
