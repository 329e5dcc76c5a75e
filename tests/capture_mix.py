"""Test helper: one small capture of several kinds of connection, byte for byte the same on
every machine (explicit MAC addresses, times and sequence numbers), for golden outputs.

Connections, in order: an IPv4 bulk transfer with one retransmitted segment and a clean
close (SF); a refused IPv4 connection (REJ); a UDP exchange (SF); an IPv6 connection the
responder resets after some data (RSTR). Keep in sync with the golden files that use it
(tests/golden/text/, tests/test_zeek_conn_log.py).
"""

from __future__ import annotations

from pathlib import Path

from scapy.all import IP, TCP, UDP, Ether, IPv6, Raw

from tests import capwriter as cw

T0 = 1_764_403_200_000_000_000  # 2025-11-29T08:00:00Z
MS = 1_000_000
MAC_A, MAC_B = "02:00:00:00:00:01", "02:00:00:00:00:02"


class Builder:
    def __init__(self) -> None:
        self.frames: list[cw.Pkt] = []
        self.t = T0

    def add(self, pkt: object, dt_ms: float = 1.0) -> None:
        self.t += int(dt_ms * MS)
        src_is_a = getattr(pkt, "src", None) in ("10.0.0.1", "fd00::1")
        ether = Ether(src=MAC_A, dst=MAC_B) if src_is_a else Ether(src=MAC_B, dst=MAC_A)
        self.frames.append(cw.Pkt(bytes(ether / pkt), self.t))  # type: ignore[operator]


def tcp_pkt(ver: int, src_a: bool, sport: int, dport: int, flags: str, seq: int, ack: int, data: bytes = b"") -> object:
    a, b = ("10.0.0.1", "10.0.0.2") if ver == 4 else ("fd00::1", "fd00::2")
    src, dst = (a, b) if src_a else (b, a)
    ip = IP(src=src, dst=dst) if ver == 4 else IPv6(src=src, dst=dst)
    return ip / TCP(sport=sport, dport=dport, flags=flags, seq=seq, ack=ack, window=65535) / Raw(data)


def build(path: Path) -> Path:
    b = Builder()
    # 1. IPv4 bulk transfer 40000 -> 80: 3 x 1000 bytes, the second sent twice (RTO), clean close.
    c, s = 1000, 5000
    b.add(tcp_pkt(4, True, 40000, 80, "S", c, 0))
    b.add(tcp_pkt(4, False, 80, 40000, "SA", s, c + 1))
    b.add(tcp_pkt(4, True, 40000, 80, "A", c + 1, s + 1))
    for i in range(3):
        b.add(tcp_pkt(4, True, 40000, 80, "PA", c + 1 + i * 1000, s + 1, b"x" * 1000))
    b.add(tcp_pkt(4, True, 40000, 80, "PA", c + 1001, s + 1, b"x" * 1000), dt_ms=200)  # retransmission
    b.add(tcp_pkt(4, False, 80, 40000, "A", s + 1, c + 3001))
    b.add(tcp_pkt(4, False, 80, 40000, "PA", s + 1, c + 3001, b"y" * 1200))
    b.add(tcp_pkt(4, True, 40000, 80, "FA", c + 3001, s + 1201))
    b.add(tcp_pkt(4, False, 80, 40000, "FA", s + 1201, c + 3002))
    b.add(tcp_pkt(4, True, 40000, 80, "A", c + 3002, s + 1202))
    # 2. Refused: 40001 -> 81, SYN answered by RST-ACK.
    b.add(tcp_pkt(4, True, 40001, 81, "S", 7000, 0), dt_ms=50)
    b.add(tcp_pkt(4, False, 81, 40001, "RA", 0, 7001))
    # 3. UDP 50000 -> 53: two queries, one answer.
    for payload, src_a in ((b"q" * 40, True), (b"q" * 40, True), (b"a" * 120, False)):
        ip = IP(src="10.0.0.1", dst="10.0.0.2") if src_a else IP(src="10.0.0.2", dst="10.0.0.1")
        sp, dp = (50000, 53) if src_a else (53, 50000)
        b.add(ip / UDP(sport=sp, dport=dp) / Raw(payload), dt_ms=10)
    # 4. IPv6 40002 -> 443: handshake, 500 bytes each way, the responder resets.
    c, s = 9000, 3000
    b.add(tcp_pkt(6, True, 40002, 443, "S", c, 0), dt_ms=1500)
    b.add(tcp_pkt(6, False, 443, 40002, "SA", s, c + 1))
    b.add(tcp_pkt(6, True, 40002, 443, "A", c + 1, s + 1))
    b.add(tcp_pkt(6, True, 40002, 443, "PA", c + 1, s + 1, b"h" * 500))
    b.add(tcp_pkt(6, False, 443, 40002, "PA", s + 1, c + 501, b"r" * 500))
    b.add(tcp_pkt(6, False, 443, 40002, "R", s + 501, 0), dt_ms=65_000)
    path.write_bytes(cw.pcap(b.frames))
    return path
