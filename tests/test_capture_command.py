"""`nettrail capture -i lo`: real loopback traffic shows up as connections, and -w writes a readable pcap."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from analysis.capture.pcap import CaptureReader

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_NET_RAW) for an AF_PACKET socket"),
]


def transfer(server: socket.socket, size: int) -> int:
    """One TCP connection on loopback to `server` sending `size` bytes; -> the server port."""
    port: int = server.getsockname()[1]

    def sink() -> None:
        conn, _ = server.accept()
        while conn.recv(65536):
            pass
        conn.close()

    t = threading.Thread(target=sink)
    t.start()
    with socket.create_connection(("127.0.0.1", port)) as c:
        c.sendall(b"n" * size)
    t.join(timeout=5)
    server.close()
    return port


def test_loopback_traffic_becomes_a_connection(tmp_path: Path) -> None:
    pcap = tmp_path / "live.pcap"
    server = socket.create_server(("127.0.0.1", 0))
    # other tests may flood loopback at the same time: capture only this test's port
    bpf = f"tcp port {server.getsockname()[1]}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "nettrail.cli", "capture", "-i", "lo", "--duration", "4", "-f", bpf, "-w", str(pcap), "--libxo", "json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    assert proc.stderr.readline() == "nettrail: capture: listening on lo, link type 1\n"  # the socket is ready
    port = transfer(server, 50_000)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert err == ""
    doc = json.loads(out)["capture"]
    [conn] = [c for c in doc["connection"] if c["dport"] == port]
    assert (conn["proto"], conn["src"], conn["dst"], conn["conn_state"], conn["bytes_orig"]) == (
        "tcp",
        "127.0.0.1",
        "127.0.0.1",
        "SF",
        50_000,
    )
    assert conn["history"].startswith("ShAD") and conn["direction_guessed"] is False
    assert conn["hook"] == "capture/lo" and conn["host_id"] == (
        os.environ.get("NETTRAIL_HOST_ID") or socket.gethostname()
    )
    # the file holds every frame the analysis saw, each once (no loopback duplicates)
    with CaptureReader(str(pcap)) as r:
        frames = sum(len(b) for b in r.batches())
    assert frames == doc["totals"]["packets"] == conn["packets_orig"] + conn["packets_resp"]
    assert doc["totals"]["packets_dropped"] == 0


def test_an_unknown_interface_is_a_one_line_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "capture", "-i", "nosuchif0", "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert proc.stderr.startswith("nettrail: capture: cannot capture on nosuchif0: ") and proc.stderr.count("\n") == 1


def test_a_bad_filter_is_a_one_line_error() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "capture", "-i", "lo", "-f", "tcp portx 1", "--duration", "1"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert proc.returncode == 1
    assert proc.stderr.startswith("nettrail: capture: bad filter 'tcp portx 1': ") and proc.stderr.count("\n") == 1


def test_frames_queued_before_the_filter_is_attached_are_neither_captured_nor_counted_as_drops(tmp_path: Path) -> None:
    """UDP floods loopback while the capture starts with a filter for one TCP port: the
    frames its packet socket took before scapy had attached the filter are discarded, so
    the capture holds this test's connection alone and reports no kernel drop."""
    flood_until = time.monotonic() + 8  # bounded: the capture runs for 3 s after it starts
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))  # never read: its queue fills, the rest is dropped there

    def flood() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            while time.monotonic() < flood_until:
                for _ in range(200):
                    tx.sendto(b"f" * 1000, sink.getsockname())
                time.sleep(0.001)

    flooder = threading.Thread(target=flood)
    flooder.start()
    try:
        server = socket.create_server(("127.0.0.1", 0))
        bpf = f"tcp port {server.getsockname()[1]}"
        proc = subprocess.Popen(
            [sys.executable, "-m", "nettrail.cli", "capture", "-i", "lo", "--duration", "3", "-f", bpf, "--libxo", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert proc.stderr is not None
        assert proc.stderr.readline() == "nettrail: capture: listening on lo, link type 1\n"
        port = transfer(server, 20_000)
        out, err = proc.communicate(timeout=30)
    finally:
        flood_until = 0.0
        flooder.join()
        sink.close()
    assert proc.returncode == 0 and err == "", err
    doc = json.loads(out)["capture"]
    assert [(c["proto"], c["dport"]) for c in doc["connection"]] == [("tcp", port)]
    assert doc["totals"]["packets_dropped"] == 0
