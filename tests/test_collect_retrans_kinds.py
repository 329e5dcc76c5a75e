"""Kernel test: retransmit records against the kernel's own counters, by cause (issue 16, item 3).
Each scenario runs in a namespace the test makes, so its nstat counters move only with the
test's traffic; loss comes from nftables rules loaded there (input hook: a segment dropped
on the way in is lost, as on a wire):
* tail loss: the last segment of a burst dropped once -> a tail loss probe (TCPLossProbes);
* a black-holed path: every data segment dropped for a second -> RTOs (TCPTimeouts);
* a dropped SYN -> a SYN retransmission (TCPSynRetrans);
* random loss (numgen random) -> fast retransmits in Recovery (TCPFastRetrans).
The identities: the `segs` of the records add up to TcpRetransSegs; those of kind `fast` to
TCPFastRetrans, `rto` to TCPTimeouts (less the SYN timeouts) + TCPSlowStartRetrans, `syn` and
`synack` to TCPSynRetrans; each `tlp` record is one TCPLossProbes. Keep in sync with
translators/tcp.py (_retrans_kind) and kmod (tcp_retransmit_skb)."""

from __future__ import annotations

import threading
import time
from collections import Counter

from tests.kernel_support import Capture, kernel, tracing
from tests.netns_lab import connected, netns_lab, receive
from translators.records import LossReport, Record, TcpRetransmit

pytestmark = kernel

COUNTERS = (
    "TcpRetransSegs", "TcpExtTCPLossProbes", "TcpExtTCPFastRetrans", "TcpExtTCPTimeouts",
    "TcpExtTCPSlowStartRetrans", "TcpExtTCPSynRetrans",
)  # fmt: skip


# a run the kernel skipped (an interrupt hit the program on its CPU) is reported with the
# periodic map reads: read them often, so that its loss report comes before the asserts
SKIPPED_EVERY = 0.2
RETRANSMIT_LOSS = ("tcp_retransmit", "tcp_retransmit_skb runs", "tcp_retransmit_synack runs")


def by_cause(records: list[Record], before: dict[str, int], after: dict[str, int]) -> tuple[Counter[str], Counter[str]]:
    """(segs per retrans_kind of the records, what the kernel's counters say per kind). Every
    segment the records miss must be counted as loss: a ring reservation that failed or a
    program run the kernel skipped (the latter may also be another socket's, on this busy
    machine, so a reported loss allows a shortfall but does not require one)."""
    retrans = [r for r in records if isinstance(r, TcpRetransmit) and r.err in (0, None)]
    ours: Counter[str] = Counter()
    for r in retrans:  # TCPSynRetrans counts SYNs and SYN-ACKs alike
        ours["syn" if r.retrans_kind == "synack" else r.retrans_kind or "none"] += r.segs or 0
    d = {n: after[n] - before[n] for n in COUNTERS}
    # SYN_SENT's retransmission timer counts in TCPTimeouts too
    syn_timeouts = sum(r.segs or 0 for r in retrans if r.retrans_kind == "syn")
    kernel_says = Counter(
        {
            "tlp": d["TcpExtTCPLossProbes"],
            "fast": d["TcpExtTCPFastRetrans"],
            "rto": d["TcpExtTCPTimeouts"] - syn_timeouts + d["TcpExtTCPSlowStartRetrans"],
            "syn": d["TcpExtTCPSynRetrans"],
        }
    )
    lost = sum(r.lost for r in records if isinstance(r, LossReport) and r.event_type in RETRANSMIT_LOSS)
    missing = d["TcpRetransSegs"] - sum(ours.values())
    assert 0 <= missing <= lost, (ours, d, lost)
    if lost:  # some went unrecorded, counted as loss: the causes can only be checked from above
        assert all(ours[k] <= kernel_says[k] for k in ours), (ours, kernel_says)
        return +ours, +ours
    return +ours, +kernel_says


def settled(cap: Capture, before: dict[str, int], after: dict[str, int]) -> list[Record]:
    """The records once every retransmitted segment the kernel counted is recorded or counted
    lost (a fixed short wait missed the last record on a busy machine); bounded, then
    by_cause's identities speak."""
    want = after["TcpRetransSegs"] - before["TcpRetransSegs"]

    def done(records: list[Record]) -> bool:
        segs = sum(r.segs or 0 for r in records if isinstance(r, TcpRetransmit) and r.err in (0, None))
        lost = sum(r.lost for r in records if isinstance(r, LossReport) and r.event_type in RETRANSMIT_LOSS)
        return segs + lost >= want

    return cap.wait_for(done, timeout=10.0)


def test_a_lost_tail_segment_gives_one_tlp_retransmit_per_loss_probe() -> None:
    with netns_lab() as ns, tracing(("tcp",), counts_every=SKIPPED_EVERY, netns=ns.inode) as cap:
        lst, client, server = connected(ns)
        port = lst.getsockname()[1]
        ns.drop(port, "meta length 780-900 numgen inc mod 1000000 < 1")  # the first 777-byte segment only
        before = ns.counters()
        for _ in range(5):
            client.sendall(b"a" * 4000)
        client.sendall(b"t" * 777)  # the tail: no new data behind it, so the probe retransmits it
        receive(server, 20777)
        after = ns.counters()
        records = settled(cap, before, after)
        for s in (client, server, lst):
            s.close()
    assert by_cause(records, before, after) == (Counter(tlp=1), Counter(tlp=1))


def test_a_black_holed_path_gives_rto_retransmits_matching_the_timeouts() -> None:
    with netns_lab() as ns, tracing(("tcp",), counts_every=SKIPPED_EVERY, netns=ns.inode) as cap:
        lst, client, server = connected(ns)
        ns.drop(lst.getsockname()[1], "meta length > 100")  # every data segment, not the ACKs
        before = ns.counters()
        client.sendall(b"r" * 20000)
        time.sleep(1.0)  # the probe at ~2 srtt, then RTOs at ~0.2, 0.6 s
        ns.stop_dropping()
        receive(server, 20000)
        after = ns.counters()
        records = settled(cap, before, after)
        for s in (client, server, lst):
            s.close()
    ours, kernel_says = by_cause(records, before, after)
    assert ours == kernel_says
    assert ours["rto"] >= 2 and ours["tlp"] == 1


def test_a_dropped_syn_gives_a_syn_retransmit() -> None:
    with netns_lab() as ns, tracing(("tcp",), counts_every=SKIPPED_EVERY, netns=ns.inode) as cap:
        lst = ns.socket()
        lst.bind(("127.0.0.1", 0))
        lst.listen()
        ns.drop(lst.getsockname()[1], "tcp flags syn / syn,ack numgen inc mod 1000000 < 1")  # the first SYN
        before = ns.counters()
        client = ns.socket()
        client.settimeout(5)
        client.connect(lst.getsockname())  # the SYN retransmitted after ~1 s gets through
        server, _ = lst.accept()
        after = ns.counters()
        records = settled(cap, before, after)
        for s in (client, server, lst):
            s.close()
    assert by_cause(records, before, after) == (Counter(syn=1), Counter(syn=1))


def test_random_loss_gives_fast_retransmits_and_segs_adding_up_to_the_kernels_count() -> None:
    total = 2_000_000  # about 1,400 segments of 1,448 bytes
    with netns_lab() as ns, tracing(("tcp",), counts_every=SKIPPED_EVERY, netns=ns.inode, ringbuf=1 << 24) as cap:
        ns.wire_like()
        lst, client, server = connected(ns)
        ns.drop(lst.getsockname()[1], "meta length > 200 numgen random mod 100 < 5")
        before = ns.counters()
        sender = threading.Thread(target=client.sendall, args=(b"l" * total,))
        sender.start()
        receive(server, total)
        sender.join(10)
        ns.stop_dropping()
        after = ns.counters()
        records = settled(cap, before, after)
        for s in (client, server, lst):
            s.close()
    ours, kernel_says = by_cause(records, before, after)
    assert ours["fast"] > 10
    # a loss probe may send new data instead of retransmitting (TCPLossProbes counts both)
    assert (ours["fast"], ours["rto"]) == (kernel_says["fast"], kernel_says["rto"])
    assert ours["tlp"] <= kernel_says["tlp"] and not ours["unknown"]
