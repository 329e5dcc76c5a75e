"""Fuzz: mutated captures never make the analysis raise (only CaptureError for unreadable headers)."""

from __future__ import annotations

import io
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.capture.pcap import CaptureError, CaptureReader
from analysis.flows.capture_flows import CapturePipeline
from nettrail.commands.analyze import write_results
from tests import capwriter as cw
from tests.tcpbuild import A, B, Conv
from translators.packet import decode_batch
from xo import Writer, parse_libxo


def seed_frames() -> list[tuple[int, bytes]]:
    c = Conv()
    c.handshake()
    for _ in range(6):
        c.send(A, "PA", b"s" * 40)
    c.send(B, "A")
    c.send(A, "PA", b"s" * 40, seq=c.seq[A] - 40)
    c.send(A, "FA")
    c.send(B, "RA")
    return c.frames


FRAMES = seed_frames()
SEEDS = [
    cw.pcap([cw.Pkt(f, t) for t, f in FRAMES]),
    cw.pcap([cw.Pkt(f, t) for t, f in FRAMES], order=">", nano=True),
    cw.pcapng(
        [
            (
                "<",
                [(1, 9), (101, 6)],
                [cw.Pkt(f if i % 2 == 0 else f[14:], t, iface=i % 2) for i, (t, f) in enumerate(FRAMES)],
            )
        ]
    ),
]


def analyse(data: bytes) -> None:
    with tempfile.NamedTemporaryFile(suffix=".pcap") as f:
        f.write(data)
        f.flush()
        try:
            reader = CaptureReader(f.name, chunk_size=128)
        except CaptureError:
            return
        with reader:
            pipe = CapturePipeline(Path(f.name).name, "f" * 16, packets=True)
            out = io.StringIO()
            w = Writer(out, parse_libxo("json"), errors=io.StringIO())
            w.open_container("analyze")
            try:
                for batch in reader.batches():
                    for rec in pipe.feed(decode_batch(batch, want_options=True)):
                        w.record(rec, name="packet")
            except CaptureError:
                return
            write_results(w, pipe, reader.damage, reader.path)
            w.finish()
            assert out.getvalue().endswith("}\n")


mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.integers(0, 10_000), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.integers(0, 255)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.sampled_from(range(len(SEEDS))), mutations=st.lists(mutation, min_size=1, max_size=8))
def test_mutated_captures_never_raise(seed: int, mutations: list[tuple[str, int, int]]) -> None:
    data = bytearray(SEEDS[seed])
    for op, pos, value in mutations:
        pos %= len(data) + 1
        if op == "flip" and pos < len(data):
            data[pos] = value
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = bytes([value]) * 4
        if not data:
            break
    analyse(bytes(data))


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=0, max_size=400))
def test_garbage_never_raises(blob: bytes) -> None:
    analyse(blob)
    analyse(cw.pcap([]) + blob)
    analyse(cw.shb() + cw.idb(1) + blob)
