"""Regression tests for the fidelity leftovers of issue 17: each capture is built with scapy
and nettrail's answer is checked against tshark 4.0's own output on the same file
(`--wireshark 4.0`) or against Zeek's documented semantics (anomalies.md §2).

- a segment of more than one byte starting at nextseq - 1 (new data after a zero window
  probe) is not a retransmission for tshark 4.0;
- SYN retries with the same ISN after a RST stay one tcp.stream (retransmissions), and a
  SYN-ACK with a new ISN is flagged reused_ports inside the same stream;
- a RST after a complete FIN exchange leaves Zeek's conn_state at SF;
- a hole that a retransmission fills is no content gap and no missed bytes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tcpbuild import MS, A, B, Conv
from tests.tshark_ref import tshark_streams

needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark (apt package) is the reference")


def connections(path: Path, *extra: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", str(path), "--libxo", "json", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["analyze"]["connection"]  # type: ignore[no-any-return]


def flagged(conn: dict[str, Any]) -> dict[str, int]:
    return {name: n for name, n in conn["analysis"].items() if n}


def tshark_flagged(path: Path) -> dict[int, dict[str, int]]:
    return {stream: {k: n for k, n in ref.flags.items() if n} for stream, ref in tshark_streams(path).items()}


def data_after_probe(tmp_path: Path) -> Path:
    """100 bytes, then 50 bytes starting one byte before nextseq, then the ACK of all."""
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"x" * 100)
    nextseq = c.seq[A]
    c.send(A, "PA", b"y" * 50, seq=nextseq - 1, dt=50 * MS)
    c.send(B, "A", ack=nextseq + 49)
    return c.write(tmp_path / "after_probe.pcap")


@needs_tshark
def test_new_data_at_nextseq_minus_one_is_no_retransmission_for_4_0(tmp_path: Path) -> None:
    path = data_after_probe(tmp_path)
    ref = tshark_flagged(path)
    assert ref == {0: {"ack_lost_segment": 1}}  # tshark 4.0 flags only the ACK
    [conn] = connections(path, "--wireshark", "4.0")
    assert flagged(conn) == ref[0]
    assert conn["history"] == "ShADa" and conn["retrans_bytes"] == 0


def syn_retries_after_rst(tmp_path: Path) -> Path:
    """A refused connection tried three times with the same ISN, one second apart."""
    c = Conv()
    for _ in range(3):
        c.send(A, "S", seq=1000, dt=1000 * MS)
        c.send(B, "RA", ack=1001)
    return c.write(tmp_path / "syn_retries.pcap")


def synack_new_isn(tmp_path: Path) -> Path:
    """The responder answers the SYN twice, the second time with another ISN (9000)."""
    c = Conv()
    c.send(A, "S")
    c.send(B, "SA")
    c.send(B, "SA", seq=9000, dt=1000 * MS)
    c.send(A, "A", ack=9001)
    c.send(A, "PA", b"x" * 10, ack=9001)
    c.send(B, "A", seq=9001, ack=1011)
    return c.write(tmp_path / "synack_new_isn.pcap")


@needs_tshark
def test_syn_retries_with_the_same_isn_after_a_rst_stay_one_stream_in_4_0(tmp_path: Path) -> None:
    path = syn_retries_after_rst(tmp_path)
    ref = tshark_flagged(path)
    assert ref == {0: {"retransmission": 2}}
    conns = connections(path, "--wireshark", "4.0")
    assert [(c["stream"], flagged(c)) for c in conns] == [(0, ref[0])]
    assert (conns[0]["conn_state"], conns[0]["history"], conns[0]["packets_orig"]) == ("REJ", "Sr", 3)
    # upstream Wireshark (the default) starts a new conversation after the RST
    upstream = connections(path)
    assert [(c["stream"], flagged(c)) for c in upstream] == [
        (0, {}),
        (1, {"reused_ports": 1}),
        (2, {"reused_ports": 1}),
    ]


@needs_tshark
def test_a_synack_with_a_new_isn_is_flagged_inside_the_same_stream_in_4_0(tmp_path: Path) -> None:
    path = synack_new_isn(tmp_path)
    ref = tshark_flagged(path)
    assert ref == {0: {"reused_ports": 1, "lost_segment": 1, "ack_lost_segment": 1}}
    conns = connections(path, "--wireshark", "4.0")
    assert [(c["stream"], flagged(c)) for c in conns] == [(0, ref[0])]
    assert (conns[0]["packets_orig"], conns[0]["packets_resp"]) == (3, 3)
    assert [c["stream"] for c in connections(path)] == [0, 1]  # upstream: a new conversation


def fin_exchange_then_rst(tmp_path: Path, rst_from_resp: bool) -> Path:
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"x" * 10)
    c.send(B, "A")
    c.send(A, "FA")
    c.send(B, "FA")
    c.send(A, "A")
    side = B if rst_from_resp else A
    c.send(side, "R", seq=c.seq[side], dt=5 * MS)
    return c.write(tmp_path / f"fin_rst_{side}.pcap")


@pytest.mark.parametrize(("rst_from_resp", "history"), [(True, "ShADaFfr"), (False, "ShADaFfR")])
def test_a_rst_after_a_complete_fin_exchange_keeps_sf(tmp_path: Path, rst_from_resp: bool, history: str) -> None:
    [conn] = connections(fin_exchange_then_rst(tmp_path, rst_from_resp))
    assert (conn["conn_state"], conn["history"]) == ("SF", history)


def test_a_rst_after_only_one_fin_is_still_a_reset(tmp_path: Path) -> None:
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"x" * 10)
    c.send(B, "A")
    c.send(A, "FA")
    c.send(B, "RA")
    [conn] = connections(c.write(tmp_path / "fin_then_rst.pcap"))
    assert (conn["conn_state"], conn["history"]) == ("RSTR", "ShADaFr")


def hole(tmp_path: Path, filled: bool) -> Path:
    """Three segments of 100 bytes, the second missing from the capture; either the sender
    retransmits it before the receiver ACKs past it (lost on the network), or the receiver
    ACKs all three (only the capture missed it)."""
    c = Conv()
    c.handshake()
    start = c.seq[A]
    for i in range(3):
        c.send(A, "PA", b"x" * 100)
        if i == 1:
            c.frames.pop()
    if filled:
        c.send(B, "A", ack=start + 100)
        c.send(A, "PA", b"x" * 100, seq=start + 100, dt=300 * MS)
    c.send(B, "A", ack=start + 300)
    c.send(A, "FA")
    c.send(B, "FA")
    c.send(A, "A")
    return c.write(tmp_path / f"hole_{filled}.pcap")


def test_a_hole_filled_by_a_retransmission_is_no_gap(tmp_path: Path) -> None:
    [conn] = connections(hole(tmp_path, filled=True))
    assert conn["analysis"]["lost_segment"] == 1  # Wireshark still says what the capture lacked
    assert (conn["history"], conn["missed_bytes"], conn["retrans_bytes"]) == ("ShADaTFf", 0, 100)


def test_a_hole_the_receiver_acks_past_is_a_gap(tmp_path: Path) -> None:
    [conn] = connections(hole(tmp_path, filled=False))
    assert (conn["history"], conn["missed_bytes"], conn["conn_state"]) == (
        "ShADaGFf",
        100,
        "SF",
    )  # the ACK, then the gap it reveals


def test_a_hole_still_open_at_the_end_is_a_gap(tmp_path: Path) -> None:
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"x" * 100)
    c.send(A, "PA", b"x" * 100)
    c.frames.pop()
    c.send(A, "PA", b"x" * 100)
    [conn] = connections(c.write(tmp_path / "open_hole.pcap"))
    assert (conn["history"], conn["missed_bytes"]) == ("ShADG", 100)


def test_holes_nobody_acks_are_gaps_even_past_the_cap(tmp_path: Path) -> None:
    """A capture of one direction only: 70 holes, no ACK ever; every one is a gap."""
    c = Conv()
    c.handshake()
    for _ in range(70):
        c.send(A, "PA", b"x" * 100)
        c.send(A, "PA", b"x" * 100)
        c.frames.pop()
    c.send(A, "PA", b"x" * 100)
    [conn] = connections(c.write(tmp_path / "one_sided.pcap"))
    assert (conn["missed_bytes"], conn["analysis"]["lost_segment"]) == (7000, 70)
    assert conn["history"] == "ShADGG"  # the 1st and the 10th gap (log scale)
