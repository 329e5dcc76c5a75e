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
