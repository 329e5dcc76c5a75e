"""Test helper: capture real loopback TCP traffic with tcpdump, and read tshark conversations.

Used by the pcap export tests. tcpdump is stopped by its PID (never by name); the
server and clients are sockets of this process. pcap_count and wait_captured are for any
test that stops a `tcpdump -U` once it has written what it must have seen.
"""

from __future__ import annotations

import shutil
import signal
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest


def pcap_count(path: Path) -> int:
    """Packets in a classic pcap file (24-byte file header, 16-byte record headers)."""
    data = path.read_bytes() if path.exists() else b""
    offset, count = 24, 0
    while offset + 16 <= len(data):
        (incl,) = struct.unpack_from("<I", data, offset + 8)
        offset += 16 + incl
        count += 1
    return count


def wait_captured(path: Path, packets: int, timeout: float = 20.0) -> int:
    """Wait until a `tcpdump -U -w path` (it writes each packet as it reads it) holds at
    least `packets`, or the bound passes; the count then."""
    deadline = time.monotonic() + timeout
    while (count := pcap_count(path)) < packets and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def need_tools() -> None:
    for tool in ("tcpdump", "tshark"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (scripts/install-system installs it)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def capture_connections(path: Path, sizes: list[int]) -> int:
    """Captures one TCP connection per size (client sends size bytes, server answers 'ok').

    Returns the server port. Needs CAP_NET_RAW (root here).
    """
    port = free_port()
    proc = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-U", "--immediate-mode", "-w", str(path), f"tcp port {port}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_listening(proc)
        _talk(port, sizes)
        time.sleep(0.3)  # let tcpdump read the last frames before it is stopped
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return port


def _wait_listening(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()  # "listening on lo, ..." once the socket is open
    if "listening on" not in line:
        proc.kill()
        pytest.skip(f"tcpdump could not capture on lo (needs CAP_NET_RAW): {line.strip()}")


def _talk(port: int, sizes: list[int]) -> None:
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        server.listen()
        for size in sizes:
            client = socket.create_connection(("127.0.0.1", port))
            peer, _ = server.accept()
            client.sendall(b"x" * size)
            got = 0
            while got < size:
                got += len(peer.recv(65536))
            peer.sendall(b"ok")
            assert client.recv(10) == b"ok"
            client.close()
            peer.close()


def tshark_conversations(path: Path) -> dict[tuple[str, str], int]:
    """{(addr:port, addr:port): total frames} from `tshark -q -z conv,tcp`."""
    out = subprocess.run(
        ["tshark", "-r", str(path), "-q", "-z", "conv,tcp"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    convs = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[1] == "<->":
            total = _total_frames(parts[3:])
            assert total is not None, f"unexpected tshark conversation line: {line!r}"
            convs[(parts[0], parts[2])] = total
    return convs


def _total_frames(cols: list[str]) -> int | None:
    """Frames columns are each followed by a byte count with a unit ('274 bytes', '10 kB')."""
    frames = []
    i = 0
    while i < len(cols) and len(frames) < 3:
        if cols[i].isdigit():
            frames.append(int(cols[i]))
            i += 3  # frames, size, unit
        else:
            i += 1
    return frames[2] if len(frames) == 3 else None


def tshark_count(path: Path, display_filter: str = "") -> int:
    cmd = ["tshark", "-r", str(path), "-T", "fields", "-e", "frame.number"]
    if display_filter:
        cmd += ["-Y", display_filter]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    return len(out.split())
