"""`nettrail analyze`: output contract, hand-built TCP situations (checked against tshark too), bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scapy.all import IP, TCP, Ether

from tests import capwriter as cw
from tests.tcpbuild import MS, T0, A, B, Conv


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", *args], capture_output=True, text=True, timeout=120
    )


def analyze(path: Path, *extra: str) -> dict[str, Any]:
    proc = run(str(path), "--libxo", "json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["analyze"]  # type: ignore[no-any-return]


def tshark_counts(path: Path, flag: str) -> int:
    out = subprocess.run(
        ["tshark", "-r", str(path), "-Y", f"tcp.analysis.{flag}"], capture_output=True, text=True, check=True
    ).stdout
    return len(out.splitlines())


needs_tshark = pytest.mark.skipif(not shutil.which("tshark"), reason="tshark (apt package) is the reference")


def lossy(tmp_path: Path) -> Path:
    """Four segments, the second lost; three duplicate ACKs; a fast retransmission."""
    c = Conv()
    c.handshake()
    start = c.seq[A]
    for i in range(4):
        c.send(A, "PA", b"x" * 100, dt=10_000)
        if i == 0:
            c.send(B, "A")
        if i == 1:
            c.frames.pop()  # lost before the capture point
    c.seq[A] = start + 400
    for _ in range(3):
        c.send(B, "A", ack=start + 100, dt=10_000)
    c.send(A, "PA", b"x" * 100, seq=start + 100, dt=1000)
    c.send(B, "A", ack=start + 400)
    c.send(A, "FA")
    c.send(B, "FA")
    c.send(A, "A")
    return c.write(tmp_path / "lossy.pcap")


def test_the_json_output_follows_the_contract(tmp_path: Path) -> None:
    out = analyze(lossy(tmp_path))
    assert list(out)[:4] == ["file", "format", "host_id", "boot_id"]
    assert out["host_id"] == "lossy.pcap" and len(out["boot_id"]) == 16
    [conn] = out["connection"]
    for key in (
        "proto",
        "src",
        "sport",
        "dst",
        "dport",
        "start",
        "end",
        "packets_orig",
        "packets_resp",
        "bytes_orig",
        "bytes_resp",
        "conn_state",
        "history",
    ):
        assert key in conn
    assert list(conn["analysis"]) == [
        "reused_ports", "retransmission", "fast_retransmission", "spurious_retransmission", "out_of_order", "lost_segment",
        "ack_lost_segment", "window_update", "window_full", "keep_alive", "keep_alive_ack", "duplicate_ack",
        "zero_window_probe", "zero_window", "zero_window_probe_ack",
    ]  # fmt: skip
    assert (conn["src"], conn["sport"], conn["dst"], conn["dport"], conn["proto"]) == (A, 40000, B, 80, "tcp")
    assert (conn["packets_orig"], conn["packets_resp"], conn["bytes_orig"], conn["bytes_resp"]) == (8, 7, 400, 0)
    # the hole is filled by the fast retransmission before anyone ACKs past it: no
    # content gap and no missed bytes (Zeek reports only what it never got)
    assert (conn["missed_bytes"], conn["retrans_bytes"]) == (0, 100)
    assert (conn["conn_state"], conn["history"]) == ("SF", "ShADaTFf")
    assert conn["conn_uuid"] and conn["boot_id"] == out["boot_id"]
    assert out["totals"]["packets"] == 15 and out["totals"]["packets_malformed"] == 0
    assert out["totals"]["connections_tcp"] == 1


@needs_tshark
def test_duplicate_acks_and_a_fast_retransmission_are_counted_like_tshark(tmp_path: Path) -> None:
    path = lossy(tmp_path)
    counts = analyze(path)["connection"][0]["analysis"]
    assert (counts["duplicate_ack"], counts["fast_retransmission"], counts["retransmission"]) == (3, 1, 1)
    for flag in ("duplicate_ack", "fast_retransmission", "retransmission", "lost_segment", "window_update"):
        assert counts[flag] == tshark_counts(path, flag), flag


def test_packets_carry_their_flags_and_dup_ack_numbers(tmp_path: Path) -> None:
    out = analyze(lossy(tmp_path), "--packets")
    segs = [p for p in out["packet"] if p["kind"] == "tcp_segment"]
    assert len(segs) == 15 and len([p for p in out["packet"] if p["kind"] == "ip_packet"]) == 15
    dups = [p for p in segs if "duplicate_ack" in p["analysis"]]
    assert [(p["dup_ack_num"], p["dup_ack_frame"]) for p in dups] == [(1, 5), (2, 5), (3, 5)]
    fast = next(p for p in segs if "fast_retransmission" in p["analysis"])
    assert fast["analysis"] == ["retransmission", "fast_retransmission"]
    assert (fast["rel_seq"], fast["direction"], fast["frame"]) == (101, "orig", 11)
    assert segs[0]["opt_mss"] == 1460 and segs[0]["tcp_flags_str"] == "SYN"
    assert out["connection"][0]["analysis"]["duplicate_ack"] == 3


@needs_tshark
def test_zero_window_probes_and_their_acks(tmp_path: Path) -> None:
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"a" * 500)
    c.send(B, "A", win=0)
    for _ in range(3):
        c.send(A, "A", b"b", dt=200 * MS)
        c.seq[A] -= 1
        c.send(B, "A", win=0, ack=c.ack[B] - 1)
    c.send(B, "A", win=1000, ack=c.ack[B] - 1, dt=400 * MS)
    c.send(A, "PA", b"b" * 10)
    path = c.write(tmp_path / "zw.pcap")
    out = analyze(path)
    counts = out["connection"][0]["analysis"]
    assert (counts["zero_window"], counts["zero_window_probe"], counts["zero_window_probe_ack"]) == (4, 3, 3)
    for flag in ("zero_window", "zero_window_probe", "zero_window_probe_ack", "window_update"):
        assert counts[flag] == tshark_counts(path, flag), flag
    [stall] = [a for a in out["alert"] if a["rule_id"] == "P4"]
    assert stall["count"] == 3 and stall["severity"] == "warning" and "responder closed its window" in stall["message"]


@needs_tshark
def test_a_new_syn_after_fin_on_the_same_ports_is_reused_ports(tmp_path: Path) -> None:
    first = Conv(isn_a=100)
    first.handshake()
    first.send(A, "FA")
    first.send(B, "FA")
    first.send(A, "A")
    second = Conv(isn_a=900000)
    second.t = first.t + 100 * MS
    second.handshake()
    path = first.write(tmp_path / "reuse.pcap", extra=second.frames)
    out = analyze(path)
    conns = out["connection"]
    assert [c["analysis"]["reused_ports"] for c in conns] == [0, 1]
    assert [c["stream"] for c in conns] == [0, 1]
    assert [c["conn_state"] for c in conns] == ["SF", "S1"]
    assert tshark_counts(path, "reused_ports") == 1


@needs_tshark
def test_keep_alives_and_their_acks(tmp_path: Path) -> None:
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"hello")
    c.send(B, "A")
    for _ in range(2):
        c.send(A, "A", seq=c.seq[A] - 1, dt=1000 * MS)
        c.send(B, "A")
    path = c.write(tmp_path / "ka.pcap")
    counts = analyze(path)["connection"][0]["analysis"]
    assert (counts["keep_alive"], counts["keep_alive_ack"]) == (2, 2)
    assert (tshark_counts(path, "keep_alive"), tshark_counts(path, "keep_alive_ack")) == (2, 2)


def test_midstream_captures_guess_the_direction_and_say_so(tmp_path: Path) -> None:
    c = Conv(sport=80, dport=40000)
    c.send(A, "PA", b"x" * 10)
    c.send(B, "A")
    [conn] = analyze(c.write(tmp_path / "mid.pcap"))["connection"]
    assert (conn["src"], conn["sport"], conn["direction_guessed"]) == (B, 40000, True)
    assert conn["conn_state"] == "OTH" and conn["history"].startswith("^")


def damaged(tmp_path: Path) -> Path:
    good = bytes(Ether() / IP(src=A, dst=B) / TCP(sport=1, dport=2, flags="S"))
    bad = good[:14] + bytes([0x41]) + good[15:]  # IHL 1
    frames = [good, bad, good[:20], bad]
    return (
        Path(tmp_path / "d.pcap").resolve()
        if (tmp_path / "d.pcap").write_bytes(cw.pcap([cw.Pkt(f, T0 + i) for i, f in enumerate(frames)]))
        else tmp_path
    )


def test_damaged_packets_are_skipped_and_counted(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    proc = run(str(path), "--libxo", "json")
    assert proc.returncode == 0 and proc.stderr == ""
    totals = json.loads(proc.stdout)["analyze"]["totals"]
    assert (totals["packets"], totals["packets_malformed"], totals["packets_tcp"]) == (4, 3, 1)


def test_warn_reports_the_first_damaged_offsets(tmp_path: Path) -> None:
    path = damaged(tmp_path)
    proc = run(str(path), "--libxo", "json,warn")
    lines = proc.stderr.splitlines()
    assert proc.returncode == 0 and len(lines) == 3
    assert lines[0] == f"nettrail: {path}: frame 2 at byte offset {24 + 16 + 54}: IPv4 header length below 20; skipped"
    assert "frame 3" in lines[1] and "IPv4 header cut short" in lines[1]


@pytest.mark.parametrize("content", [b"not a capture at all", b"\xd4\xc3\xb2\xa1\x02\x00"])
def test_an_unreadable_file_is_one_line_naming_the_file_and_offset(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "junk.pcap"
    path.write_bytes(content)
    proc = run(str(path))
    assert proc.returncode == 1 and proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"nettrail: analyze: {path}: byte offset ")


def test_a_missing_file_is_an_error(tmp_path: Path) -> None:
    proc = run(str(tmp_path / "nope.pcap"))
    assert proc.returncode == 1
    assert proc.stderr == f"nettrail: analyze: {tmp_path / 'nope.pcap'}: byte offset 0: No such file or directory\n"


@pytest.mark.parametrize("style", ["text", "xml", "html"])
def test_every_style_renders(tmp_path: Path, style: str) -> None:
    proc = run(str(lossy(tmp_path)), "--libxo", style)
    assert proc.returncode == 0, proc.stderr
    assert "10.0.0.1" in proc.stdout and "ShADaTFf" in proc.stdout


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    proc = run(str(lossy(tmp_path)), "--libxo", "json")
    assert proc.stderr == ""


def test_a_progress_bar_goes_to_a_terminal_stderr_only(tmp_path: Path) -> None:
    """Over 4 MiB and stderr a terminal: rich draws on stderr; stdout stays plain JSON."""
    import os
    import pty
    import struct
    import threading

    base = bytes(Ether() / IP(src=A, dst=B) / TCP(sport=1, dport=2, flags="A") / (b"p" * 100))

    def frame(i: int) -> bytes:
        raw = bytearray(base)
        struct.pack_into(">I", raw, 14 + 20 + 4, i * 100)  # the TCP sequence number
        return bytes(raw)

    frames = [cw.Pkt(frame(i), T0 + i * 1000) for i in range(40_000)]
    path = tmp_path / "big.pcap"
    path.write_bytes(cw.pcap(frames))
    assert path.stat().st_size > 4 << 20
    leader, follower = pty.openpty()
    drawn = bytearray()

    def drain() -> None:  # keep reading so the bar can never fill the terminal's buffer
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:
                return
            if not chunk:
                return
            drawn.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    proc = subprocess.Popen(
        [sys.executable, "-m", "nettrail.cli", "analyze", str(path), "--libxo", "json"],
        stdout=subprocess.PIPE, stderr=follower, text=True,
    )  # fmt: skip
    os.close(follower)
    out, _ = proc.communicate(timeout=120)
    reader.join(timeout=10)
    os.close(leader)
    assert proc.returncode == 0
    assert json.loads(out)["analyze"]["totals"]["packets"] == 40_000
    assert b"big.pcap" in drawn and b"\x1b[" in bytes(drawn)  # the bar's label and terminal control sequences


def test_an_empty_capture_has_empty_lists_and_zero_totals(tmp_path: Path) -> None:
    path = tmp_path / "empty.pcapng"
    path.write_bytes(cw.shb() + cw.idb(1))
    out = analyze(path)
    assert (out["format"], out["connection"], out["alert"]) == ("pcapng", [], [])
    assert out["totals"]["packets"] == 0 and out["totals"]["packets_malformed"] == 0
