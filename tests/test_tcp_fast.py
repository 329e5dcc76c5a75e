"""The C fast path of the TCP analysis (analysis/flows/tcp_fast.py) gives the Python analysis' output exactly.

Random captures (a fixed seed each) of many interleaved IPv4 and IPv6 conversations with
loss, retransmissions, reordering, duplicated packets, duplicate ACKs, SACK blocks, zero
windows, keep-alives, port reuse and timestamps that step back are decoded with the numpy
decoder and analysed twice: through the C fast path and through the Python path alone. The
connection records (every analysis count, Zeek state and history, RTTs, findings), totals
and alerts must be identical. tshark agreement itself is tested elsewhere
(tests/test_analyze_vs_tshark.py and friends, which now run through the C path).
"""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest
from scapy.all import IP, TCP, Ether, IPv6, Raw

from analysis.capture.pcap import CaptureReader
from analysis.flows import tcp_fast
from analysis.flows.capture_flows import CapturePipeline
from tests import capwriter as cw
from translators.packet import decode_batch

pytestmark = pytest.mark.skipif(tcp_fast.load() is None, reason="no C compiler: the fast path is not built")

MS = 1_000_000
T0 = 1_700_000_000_000_000_000


class Side:
    def __init__(self, addr: str, port: int, isn: int) -> None:
        self.addr, self.port, self.seq = addr, port, isn


def conversation(rng: random.Random, k: int, v6: bool) -> list[tuple[int, bytes]]:
    """One conversation's frames with their timestamps (not yet interleaved)."""
    a = Side(f"fd00::{k + 1:x}" if v6 else f"10.0.{k // 250}.{k % 250 + 1}", 30000 + k, rng.randrange(1 << 32))
    b = Side("fd00::ffff" if v6 else "10.9.9.9", 80 + (k % 3), rng.randrange(1 << 32))
    frames: list[tuple[int, bytes]] = []
    t = T0 + k * 37_000 + rng.randrange(MS)

    def pkt(
        src: Side,
        dst: Side,
        flags: str,
        seq: int,
        ack: int,
        data: bytes = b"",
        win: int = 4000,
        opts: list | None = None,
    ) -> None:  # type: ignore[type-arg]
        nonlocal t
        ip = IPv6(src=src.addr, dst=dst.addr) if v6 else IP(src=src.addr, dst=dst.addr)
        tcp = TCP(
            sport=src.port,
            dport=dst.port,
            seq=seq % (1 << 32),
            ack=ack % (1 << 32),
            flags=flags,
            window=win,
            options=opts or [],
        )
        t += (
            rng.choice((1_000, 5_000, 20_000, 300_000, 2 * MS)) if rng.random() < 0.9 else -rng.randrange(1_000, 30_000)
        )
        frames.append((t, bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip / tcp / Raw(data))))
        if rng.random() < 0.01:  # captured twice
            frames.append((t, frames[-1][1]))

    for _round in range(1 + (rng.random() < 0.15)):  # sometimes the ports are reused
        a.seq, b.seq = rng.randrange(1 << 32), rng.randrange(1 << 32)
        pkt(a, b, "S", a.seq, 0, opts=[("MSS", 1460), ("WScale", 7), ("SAckOK", b"")])
        a.seq += 1
        pkt(b, a, "SA", b.seq, a.seq, opts=[("MSS", 1460), ("WScale", 7), ("SAckOK", b"")])
        b.seq += 1
        pkt(a, b, "A", a.seq, b.seq)
        acked = a.seq
        sent: list[tuple[int, int]] = []
        for _ in range(rng.randrange(20, 160)):
            r = rng.random()
            size = rng.choice((1428, 1428, 1428, 700, 100, 1))
            if r < 0.62:  # new data, sometimes lost before the capture point
                if rng.random() > 0.04:
                    pkt(a, b, "A" if rng.random() < 0.8 else "PA", a.seq, b.seq, b"x" * size)
                sent.append((a.seq, size))
                a.seq += size
            elif r < 0.85:  # an ACK: cumulative, sometimes behind (duplicate) or with SACK
                if sent and rng.random() < 0.7:
                    acked = max(acked, rng.choice(sent)[0])
                opts = [("SAck", (acked + 1428, acked + 4284))] if rng.random() < 0.2 else None
                win = 0 if rng.random() < 0.03 else rng.choice((4000, 4000, 3000))
                pkt(b, a, "A", b.seq, acked, win=win, opts=opts)
            elif r < 0.93 and sent:  # a retransmission of something sent
                seq, size = rng.choice(sent[-12:])
                pkt(a, b, "A", seq, b.seq, b"x" * size)
            elif r < 0.96:  # the server answers with data
                pkt(b, a, "PA", b.seq, a.seq, b"y" * 300)
                b.seq += 300
            elif r < 0.98:  # a keep-alive
                pkt(a, b, "A", a.seq - 1, b.seq, b"" if rng.random() < 0.5 else b"k")
            else:  # reorder the last two frames
                if len(frames) > 4:
                    frames[-1], frames[-2] = frames[-2], frames[-1]
            if rng.random() < 0.3:  # the receiver keeps up
                acked = a.seq
                pkt(b, a, "A", b.seq, acked)
        if rng.random() < 0.9:
            pkt(a, b, "FA", a.seq, b.seq)
            a.seq += 1
            pkt(b, a, "FA", b.seq, a.seq)
            b.seq += 1
            pkt(a, b, "A", a.seq, b.seq)
        elif rng.random() < 0.5:
            pkt(b, a, "R", b.seq, 0)
    return frames


def capture(tmp_path: Path, seed: int, conversations: int = 40) -> Path:
    rng = random.Random(seed)
    streams = [conversation(rng, k, v6=k % 4 == 3) for k in range(conversations)]
    merged: list[tuple[int, bytes]] = []
    cursors = [0] * len(streams)
    live = [k for k in range(len(streams)) if streams[k]]
    while live:  # interleave: each conversation's own order kept, the file order random
        k = rng.choice(live)
        merged.append(streams[k][cursors[k]])
        cursors[k] += 1
        if cursors[k] == len(streams[k]):
            live.remove(k)
    path = tmp_path / f"fuzz{seed}.pcap"
    path.write_bytes(cw.pcap([cw.Pkt(data, ts) for ts, data in merged], nano=True))
    return path


def analyse(path: Path, fast: bool, compat: str) -> bytes:
    pipeline = CapturePipeline("fuzz", "id", compat=compat)
    if not fast:
        pipeline.tcp.fast = False
    with CaptureReader(str(path), chunk_size=64 << 10) as reader:  # several batches
        for batch in reader.batches():
            for _ in pipeline.feed(decode_batch(batch).portable()):
                pass
    if fast:
        assert pipeline.tcp.fast, "the C fast path was not used"
    out = {"connections": pipeline.connections(), "alerts": pipeline.alerts(), "totals": pipeline.totals}
    return msgspec.json.encode(out)


@pytest.fixture(scope="module", params=range(4))
def fuzzed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return capture(tmp_path_factory.mktemp("fuzz"), request.param)  # scapy takes seconds: once per seed


@pytest.mark.parametrize("compat", ["4.0", "upstream"])
def test_the_c_fast_path_changes_nothing(fuzzed: Path, compat: str) -> None:
    assert analyse(fuzzed, True, compat) == analyse(fuzzed, False, compat)


def test_packets_take_both_paths(fuzzed: Path) -> None:
    """Not a speed figure: that the comparison above exercised C, not only the hand-backs."""
    path = fuzzed
    pipeline = CapturePipeline("fuzz", "id")
    calls = 0
    full = pipeline.tcp.packet

    def counted(*args: object) -> object:
        nonlocal calls
        calls += 1
        return full(*args)  # type: ignore[arg-type]

    pipeline.tcp.packet = counted  # type: ignore[method-assign]
    packets = 0
    with CaptureReader(str(path)) as reader:
        for batch in reader.batches():
            d = decode_batch(batch).portable()
            packets += d.n
            for _ in pipeline.feed(d):
                pass
    assert 0 < calls < packets
