"""Test helper: per-stream tcp.analysis counts and per-direction packets/bytes from tshark (the reference).

`tshark_streams(pcap)` runs tshark once with `-T fields` and counts, per tcp.stream, the
packets on which each `tcp.analysis.<flag>` field is present (what the display filter
would match), plus packets and payload bytes per (source address, source port).

Keep in sync with: translators.records.TCP_ANALYSIS_FLAGS.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from translators.records import TCP_ANALYSIS_FLAGS


@dataclass
class StreamRef:
    flags: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TCP_ANALYSIS_FLAGS, 0))
    packets: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))
    bytes: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))
    frames: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))


def tshark_streams(pcap: Path) -> dict[int, StreamRef]:
    fields = ["frame.number", "tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "tcp.len"]
    fields += [f"tcp.analysis.{name}" for name in TCP_ANALYSIS_FLAGS]
    cmd = ["tshark", "-n", "-r", str(pcap), "-Y", "tcp && !icmp", "-T", "fields", "-E", "occurrence=f"]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout
    streams: dict[int, StreamRef] = defaultdict(StreamRef)
    for line in out.splitlines():
        cols = line.split("\t")
        frame, stream, src4, src6, sport, tcplen = cols[:6]
        ref = streams[int(stream)]
        side = (src4 or src6, int(sport))
        ref.packets[side] += 1
        ref.bytes[side] += int(tcplen or 0)
        for name, value in zip(TCP_ANALYSIS_FLAGS, cols[6:], strict=True):
            if value:
                ref.flags[name] += 1
                ref.frames[name].append(int(frame))
    return dict(streams)


# Zeek history letters that are recorded once per direction, in the order they first happen
FIRST_LETTERS = "ShAaDd"


def first_letters(pcap: Path) -> dict[int, str]:
    """Per tcp.stream, the letters of FIRST_LETTERS in the order tshark's packets first show
    them: S SYN, h SYN-ACK, A/a a bare ACK, D/d payload (upper case: the side of the first SYN)."""
    cmd = ["tshark", "-n", "-r", str(pcap), "-Y", "tcp && !icmp", "-T", "fields", "-E", "occurrence=f"]
    for f in ("tcp.stream", "ip.src", "ipv6.src", "tcp.srcport", "tcp.flags", "tcp.len"):
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout
    orig: dict[int, tuple[str, int]] = {}
    letters: dict[int, str] = defaultdict(str)
    for line in out.splitlines():
        stream_s, src4, src6, sport, flags_s, tcplen = line.split("\t")
        stream, flags = int(stream_s), int(flags_s, 16)
        side = (src4 or src6, int(sport))
        syn, ack, fin_rst = flags & 0x02, flags & 0x10, flags & 0x05
        if syn and not ack:
            orig.setdefault(stream, side)
        if stream not in orig:
            continue  # a stream caught without its SYN: no originator to name
        if syn:
            ch = "h" if ack else "s"
        elif int(tcplen or 0) > 0:
            ch = "d"
        elif ack and not fin_rst:
            ch = "a"
        else:
            continue
        key = ch.upper() if side == orig[stream] else ch
        if key in FIRST_LETTERS and key not in letters[stream]:
            letters[stream] += key
    return dict(letters)


def once_order(history: str) -> str:
    """The letters of FIRST_LETTERS in a Zeek history, each at its first occurrence."""
    seen = ""
    for ch in history:
        if ch in FIRST_LETTERS and ch not in seen:
            seen += ch
    return seen
