"""Kernel tests of skb-lifecycle in windows (--skb-window OPEN/EVERY): its per-buffer hooks
are attached for a window only (bpftool's link list says so, open and closed), the
datagrams sent inside the windows are every one counted and followed whole, those sent
between them neither counted nor followed, also where another provider keeps a
first-sighting hook attached (ip-flows' net_dev_queue and netif_receive_skb), and the
H2 report carries the exact counts and the windows' open time."""

from __future__ import annotations

import socket
import time

import pytest

from collector.health.reporter import SelfHealth
from tests.kernel_support import Capture, attached_tracepoints, kernel, lifetimes, pinned, tracing
from translators.records import IpFlowCounters, SamplingReport
from translators.skb_window import WindowSpec

pytestmark = kernel

SPEC = WindowSpec(0.3, 0.8)
PER_BUFFER = {"net_dev_queue", "netif_receive_skb", "skb_copy_datagram_iovec", "consume_skb"}
UDP_STAGES = ["tx-first", "xmit-start", "xmit", "rx", "copy", "consume"]
IP_UDP_HEADERS = 28


def send_sized(rx: socket.socket, tx: socket.socket, sizes: range) -> None:
    port = rx.getsockname()[1]
    for size in sizes:
        tx.sendto(b"w" * size, ("127.0.0.1", port))
        assert len(rx.recv(4096)) == size


def poll_until(cap: Capture, state: str, timeout: float = 10.0) -> None:
    """Poll (the windows' clock ticks in poll) until the windows reach `state`."""
    windows = cap.source.skb_windows
    assert windows is not None
    end = time.monotonic() + timeout
    while windows.state != state and time.monotonic() < end:
        cap.drain()
    assert windows.state == state


@pytest.mark.parametrize(
    "providers",
    [pytest.param(("skb-lifecycle",), marks=pytest.mark.matrix), ("ip-flows", "skb-lifecycle")],
    ids=["alone", "ip-flows"],
)
def test_windows_follow_the_buffers_sent_while_open_and_only_those(providers: tuple[str, ...]) -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    port = rx.getsockname()[1]
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    first, between, second = range(100, 140), range(300, 360), range(500, 530)
    reports: list[SamplingReport] = []
    with pinned(0), tracing(providers, port=port, skb_window=SPEC, counts_every=0.2) as cap:
        windows = cap.source.skb_windows
        assert windows is not None and windows.state == "closed"
        shared = PER_BUFFER & {"net_dev_queue", "netif_receive_skb"} if "ip-flows" in providers else set()
        # before the first poll: no window yet, only what other providers need is attached
        assert attached_tracepoints(cap.session) & PER_BUFFER == shared
        health = SelfHealth(cap.source, cap.source.env)
        cap.drain()
        assert windows.state == "open"
        assert attached_tracepoints(cap.session) & PER_BUFFER == PER_BUFFER - set(cap.session.absent)
        send_sized(rx, tx, first)
        poll_until(cap, "closed")  # closed, and its end hooks detached once its lifetimes ended
        assert attached_tracepoints(cap.session) & PER_BUFFER == shared
        # between windows (the clock ticks only in poll): nothing starts, nothing is counted
        send_sized(rx, tx, between)
        poll_until(cap, "open")
        send_sized(rx, tx, second)
        poll_until(cap, "closed")
        records = cap.settle()
        # settle polls, and a window may have opened meanwhile: close it, then poll no more,
        # so that the windows' open time stands still while the reports are made
        poll_until(cap, "closed")
        reports.extend(r for r in health.add(records) if isinstance(r, SamplingReport))
        reports.extend(r for r in health.add([], final=True) if isinstance(r, SamplingReport))
        counts = cap.session.skb_sampling()
        live = cap.session.skb_follow_counts()
        open_total = windows.open_total(time.monotonic())
        lost_reads = cap.lost("skb-lifecycle", "skb_lifecycle.read")
    tx.close()
    rx.close()
    sent_in_windows = len(first) + len(second)
    # every buffer sent in a window counted and followed (no sampling), none of the others
    assert counts == (sent_in_windows, sent_in_windows)
    assert live == (0, 0) or lost_reads  # every followed lifetime ended (where the kernel shows reads end)
    lives = lifetimes(records)
    # which datagram each is: its received length (the later stages' length differs by kernel)
    sizes = sorted(next(r.len for r in life if r.stage == "rx") - IP_UDP_HEADERS for life in lives.values())
    assert sizes == [*first, *second]
    # whole, as far as this kernel shows: "copy" only where the datagram is copied through
    # skb_copy_datagram_iovec (6.1 and 6.12 copy a linear one with copy_linear_skb, which has
    # no tracepoint), and before 6.3 the consume may not be seen (no receive call's return)
    whole = [s for s in UDP_STAGES if s != "copy"][: -1 if lost_reads else None]
    stages = [[r.stage for r in life if r.stage != "copy"][: len(whole)] for life in lives.values()]
    assert stages == [whole] * sent_in_windows
    # H2: the same exact counts, with the time the windows were open beside them
    assert {(r.event_type, r.setting) for r in reports} == {("skb_event", "skb-sample 1, skb-window 0.3/0.8")}
    assert (sum(r.observed for r in reports), sum(r.emitted for r in reports)) == (sent_in_windows, sent_in_windows)
    assert sum(r.open_s or 0 for r in reports) == pytest.approx(open_total, abs=1e-5)
    assert windows.windows >= 2 and open_total >= 2 * SPEC.open_s  # a third may open while the test settles
    if "ip-flows" in providers:
        # the shared hooks stayed: ip-flows counted every datagram, windows or not
        flows = [r for r in records if isinstance(r, IpFlowCounters) and r.dport == port and r.direction == "send"]
        assert sum(r.packets_delta for r in flows) == len(first) + len(between) + len(second)
