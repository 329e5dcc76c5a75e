"""A small capture written with scapy for the capture-import tests (tests/test_capture_import.py, test_sink_spool_e2e.py)."""

from __future__ import annotations

from pathlib import Path

from scapy.layers.inet import IP, TCP
from scapy.utils import wrpcap


def write_capture(path: Path) -> Path:
    """Two TCP connections: a clean exchange 10.1.0.1:40000 -> 10.1.0.2:80, and one refused with a RST."""
    c, s = IP(src="10.1.0.1", dst="10.1.0.2"), IP(src="10.1.0.2", dst="10.1.0.1")
    packets = [
        c / TCP(sport=40000, dport=80, flags="S", seq=100),
        s / TCP(sport=80, dport=40000, flags="SA", seq=500, ack=101),
        c / TCP(sport=40000, dport=80, flags="A", seq=101, ack=501),
        c / TCP(sport=40000, dport=80, flags="PA", seq=101, ack=501) / b"GET / HTTP/1.0\r\n\r\n",
        s / TCP(sport=80, dport=40000, flags="A", seq=501, ack=119),
        c / TCP(sport=40000, dport=80, flags="FA", seq=119, ack=501),
        s / TCP(sport=80, dport=40000, flags="FA", seq=501, ack=120),
        c / TCP(sport=40000, dport=80, flags="A", seq=120, ack=502),
        c / TCP(sport=40001, dport=81, flags="S", seq=900),
        s / TCP(sport=81, dport=40001, flags="RA", seq=0, ack=901),
    ]
    for i, p in enumerate(packets):
        p.time = 1_700_000_000 + i * 0.01
    wrpcap(str(path), packets)
    return path
