"""Test helper: build TCP conversations packet by packet (scapy bytes, explicit sequence numbers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scapy.all import IP, TCP, Ether, Raw

from tests import capwriter as cw

A, B = "10.0.0.1", "10.0.0.2"
T0 = 1_700_000_000_000_000_000
MS = 1_000_000


class Conv:
    """Builds one TCP conversation packet by packet with explicit sequence numbers."""

    def __init__(self, sport: int = 40000, dport: int = 80, isn_a: int = 1000, isn_b: int = 5000) -> None:
        self.sport, self.dport = sport, dport
        self.seq = {A: isn_a, B: isn_b}
        self.ack = {A: 0, B: 0}
        self.frames: list[tuple[int, bytes]] = []
        self.t = T0

    def send(
        self,
        src: str,
        flags: str,
        data: bytes = b"",
        dt: int = MS,
        seq: int | None = None,
        ack: int | None = None,
        win: int = 1000,
        opts: list[Any] | None = None,
    ) -> None:
        dst = B if src == A else A
        sport, dport = (self.sport, self.dport) if src == A else (self.dport, self.sport)
        s = self.seq[src] if seq is None else seq
        a = self.ack[src] if ack is None else ack
        pkt = (
            Ether()
            / IP(src=src, dst=dst)
            / TCP(sport=sport, dport=dport, seq=s, ack=a, flags=flags, window=win, options=opts or [])
            / Raw(data)
        )
        self.t += dt
        self.frames.append((self.t, bytes(pkt)))
        if seq is None:
            self.seq[src] = s + len(data) + (1 if "S" in flags or "F" in flags else 0)
        end = s + len(data) + (1 if "S" in flags or "F" in flags else 0)
        self.ack[dst] = max(self.ack[dst], end)

    def handshake(self) -> None:
        self.send(A, "S", opts=[("MSS", 1460), ("WScale", 0)])
        self.send(B, "SA", opts=[("MSS", 1460), ("WScale", 0)])
        self.send(A, "A")

    def write(self, path: Path, extra: list[tuple[int, bytes]] | None = None) -> Path:
        frames = sorted(self.frames + (extra or []), key=lambda f: f[0])
        path.write_bytes(cw.pcap([cw.Pkt(data, ts) for ts, data in frames], nano=True))
        return path
