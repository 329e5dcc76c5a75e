"""A capture whose timestamps step back is classified like tshark (Wireshark 4.0 and upstream rules).

Wireshark times a segment against the packet that last advanced the sequence (out-of-order)
and against the peer's last ACK (fast retransmission) in an unsigned 64-bit integer, so a
segment stamped a few microseconds *before* that packet — which a loaded multi-CPU capture
host produces (CI: tests/test_analyze_vs_tshark.py, server stream 6, 2 segments) — is
"very late": a plain retransmission, not out-of-order and not a fast retransmission.
nettrail clamped the difference to 0 and called them out-of-order / fast retransmission.
The same holds for the threshold, the handshake RTT: negative when the handshake's ACK is
stamped before the SYN, and then a huge unsigned threshold.

Keep in sync with: analysis/flows/tcp_checks.py (U64).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests import capwriter as cw
from tests.tcpbuild import MS, A, B, Conv
from tests.test_analyze_command import analyze
from tests.tshark_ref import tshark_streams

needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark (apt package) is the reference")

COMPARED = (
    "retransmission",
    "fast_retransmission",
    "spurious_retransmission",
    "out_of_order",
    "lost_segment",
    "duplicate_ack",
)


def retransmission_stamped_before_the_last_advance(c: Conv) -> None:
    """Segment 2 is lost; segment 3 advances nextseq; segment 2's retransmission comes next
    in the file but is stamped 5 µs before segment 3 (tshark 4.0.17: Retransmission)."""
    c.handshake()
    start = c.seq[A]
    c.send(A, "PA", b"x" * 100, dt=MS)
    c.send(A, "PA", b"x" * 100, dt=10_000)
    c.frames.pop()  # lost before the capture point
    c.send(A, "PA", b"x" * 100, dt=10_000)
    c.send(A, "PA", b"x" * 100, seq=start + 100, dt=-5_000)
    c.send(B, "A", ack=start + 300, dt=MS)


def retransmission_stamped_before_the_last_duplicate_ack(c: Conv) -> None:
    """Three duplicate ACKs ask for segment 2; its retransmission is stamped 5 µs before the
    third of them, after the last advance (tshark 4.0.17: Out-Of-Order, no fast retransmission;
    upstream times out-of-order from the peer's last packet too: a plain retransmission)."""
    c.handshake()
    start = c.seq[A]
    c.send(A, "PA", b"x" * 100, dt=MS)
    c.send(B, "A", dt=10_000)
    c.send(A, "PA", b"x" * 100, dt=10_000)
    c.frames.pop()  # lost before the capture point
    c.send(A, "PA", b"x" * 100, dt=10_000)
    c.send(A, "PA", b"x" * 100, dt=5 * MS)
    for _ in range(3):
        c.send(B, "A", ack=start + 100, dt=20_000)
    c.send(A, "PA", b"x" * 100, seq=start + 100, dt=-5_000)
    c.send(B, "A", ack=start + 400, dt=MS)


def handshake_ack_stamped_before_the_syn(c: Conv) -> None:
    """The handshake's ACK is stamped 10 µs before the SYN: Wireshark's iRTT is negative, and
    as an unsigned out-of-order threshold it is huge, so a retransmission 50 ms after the
    last advance is still out-of-order (tshark 4.0.17 shows iRTT -0.00001 and Out-Of-Order)."""
    c.send(A, "S", opts=[("MSS", 1460), ("WScale", 0)])
    syn = c.t
    c.send(B, "SA", opts=[("MSS", 1460), ("WScale", 0)])
    c.send(A, "A", dt=syn - 10_000 - c.t)
    c.t = syn + 2 * MS
    start = c.seq[A]
    c.send(A, "PA", b"x" * 100, dt=MS)
    c.send(A, "PA", b"x" * 100, dt=10_000)
    c.frames.pop()  # lost before the capture point
    c.send(A, "PA", b"x" * 100, dt=10_000)
    c.send(A, "PA", b"x" * 100, seq=start + 100, dt=50 * MS)
    c.send(B, "A", ack=start + 300, dt=MS)


def capture(tmp_path: Path) -> Path:
    first, second, third = Conv(sport=40000), Conv(sport=40001), Conv(sport=40002)
    retransmission_stamped_before_the_last_advance(first)
    second.t = first.t + 100 * MS
    retransmission_stamped_before_the_last_duplicate_ack(second)
    third.t = second.t + 100 * MS
    handshake_ack_stamped_before_the_syn(third)
    frames = first.frames + second.frames + third.frames  # file order, not sorted: the timestamps step back
    path = tmp_path / "steps_back.pcap"
    path.write_bytes(cw.pcap([cw.Pkt(data, ts) for ts, data in frames], nano=True))
    return path


RETRANSMISSION = {"retransmission": 1, "out_of_order": 0, "lost_segment": 1, "duplicate_ack": 0}
OUT_OF_ORDER = {"retransmission": 0, "out_of_order": 1, "lost_segment": 1, "duplicate_ack": 0}
WANT = {
    "4.0": {40000: RETRANSMISSION, 40001: {**OUT_OF_ORDER, "duplicate_ack": 3}, 40002: OUT_OF_ORDER},
    "upstream": {40000: RETRANSMISSION, 40001: {**RETRANSMISSION, "duplicate_ack": 3}, 40002: OUT_OF_ORDER},
}


@pytest.mark.parametrize("semantics", ["4.0", "upstream"])
def test_a_segment_stamped_before_its_reference_packet_is_very_late(tmp_path: Path, semantics: str) -> None:
    out = analyze(capture(tmp_path), "--wireshark", semantics)
    got = {c["sport"]: {k: c["analysis"][k] for k in COMPARED} for c in out["connection"]}
    no_fast = {"fast_retransmission": 0, "spurious_retransmission": 0}
    assert got == {port: {**no_fast, **want} for port, want in WANT[semantics].items()}


@needs_tshark
def test_tshark_agrees(tmp_path: Path) -> None:
    path = capture(tmp_path)
    out = analyze(path, "--wireshark", "4.0")
    ref = tshark_streams(path)
    for conn in out["connection"]:
        assert {k: conn["analysis"][k] for k in COMPARED} == {k: ref[conn["stream"]].flags[k] for k in COMPARED}
