"""Pcap alerts P1-P6 (anomalies.md §3.5) on hand-built conversations: each fires at its threshold, not below."""

from __future__ import annotations

from pathlib import Path

from analysis.capture.pcap import CaptureReader
from analysis.flows.capture_flows import CapturePipeline
from tests.tcpbuild import MS, A, B, Conv
from translators.packet import decode_batch
from translators.records import Alert


def alerts(path: Path) -> list[Alert]:
    pipe = CapturePipeline(path.name, "0" * 16)
    with CaptureReader(str(path)) as r:
        for batch in r.batches():
            for _ in pipe.feed(decode_batch(batch)):
                pass
    pipe.connections()
    return pipe.alerts()


def rules(path: Path) -> list[str]:
    return [a.rule_id for a in alerts(path)]


def bulk(retransmitted: int, segments: int = 25) -> Conv:
    """`segments` data segments, the first `retransmitted` of them sent again after an RTO."""
    c = Conv()
    c.handshake()
    start = c.seq[A]
    for _ in range(segments):
        c.send(A, "PA", b"d" * 100)
    for k in range(retransmitted):
        c.send(A, "PA", b"d" * 100, seq=start + 100 * k, dt=300 * MS)
    c.send(B, "A", ack=c.seq[A])
    return c


def test_p1_fires_above_15_percent_retransmitted_segments(tmp_path: Path) -> None:
    found = [a for a in alerts(bulk(5).write(tmp_path / "p1.pcap")) if a.rule_id == "P1"]
    assert len(found) == 1
    a = found[0]
    assert (a.severity, a.count, a.src, a.dport, a.proto) == ("warning", 5, A, 80, "tcp")
    assert a.metric == round(5 / 30, 6)
    assert a.thresholds == {"ratio": 0.15, "min_data_segments": 20}
    assert a.evidence == [29, 30, 31, 32, 33]  # 3 handshake + 25 data frames come first
    assert "5 of 30 data segments from the originator were retransmitted" in a.message


def test_p1_stays_quiet_at_or_below_the_threshold(tmp_path: Path) -> None:
    assert "P1" not in rules(bulk(4).write(tmp_path / "p1.pcap"))  # 4 / 29 = 13.8 %
    assert "P1" not in rules(bulk(5, segments=10).write(tmp_path / "few.pcap"))  # below 20 data segments


def test_p2_fires_on_reordering(tmp_path: Path) -> None:
    c = Conv()
    c.send(A, "S", dt=MS)
    c.send(B, "SA", dt=5 * MS)
    c.send(A, "A", dt=5 * MS)  # iRTT 10 ms
    for _ in range(5):
        first = c.seq[A]
        c.send(A, "PA", b"o" * 100, seq=first + 100, dt=100_000)
        c.send(A, "PA", b"o" * 100, seq=first, dt=100_000)  # arrives after its successor
        c.seq[A] = first + 200
        c.send(B, "A", ack=c.seq[A], dt=100_000)
        for _ in range(3):
            c.send(A, "PA", b"o" * 100, dt=100_000)
    found = [a for a in alerts(c.write(tmp_path / "p2.pcap")) if a.rule_id == "P2"]
    assert [(a.severity, a.count) for a in found] == [("notice", 5)]


def test_p3_reports_capture_gaps_only_after_the_first_two_seconds(tmp_path: Path) -> None:
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"e" * 100)
    c.seq[A] += 100  # a segment the capture missed, early: normal
    c.send(A, "PA", b"e" * 100)
    assert "P3" not in rules(c.write(tmp_path / "early.pcap"))
    c.seq[A] += 100  # and one late in the connection
    c.send(A, "PA", b"e" * 100, dt=3000 * MS)
    found = [a for a in alerts(c.write(tmp_path / "late.pcap")) if a.rule_id == "P3"]
    assert [(a.severity, a.count) for a in found] == [("notice", 1)]
    assert found[0].message.startswith("capture incomplete")


def test_p5_fires_when_three_duplicate_acks_get_no_retransmission(tmp_path: Path) -> None:
    c = Conv()
    c.handshake()
    start = c.seq[A]
    c.send(A, "PA", b"f" * 100)
    c.seq[A] += 100
    c.send(B, "A", ack=start + 100)
    for _ in range(3):
        c.send(A, "PA", b"f" * 100)
        c.send(B, "A", ack=start + 100)
    found = [a for a in alerts(c.write(tmp_path / "p5.pcap")) if a.rule_id == "P5"]
    assert [(a.severity, a.count) for a in found] == [("notice", 3)]
    c.send(A, "PA", b"f" * 100, seq=start + 100, dt=100_000)  # the sender reacts
    assert "P5" not in rules(c.write(tmp_path / "p5-ok.pcap"))


def reused(times: int) -> Conv:
    c = Conv(isn_a=1)
    for k in range(times):
        c.seq[A] = 1 + k * 100_000
        c.handshake()
        c.send(A, "FA")
        c.send(B, "FA")
        c.send(A, "A")
    return c


def test_p6_fires_when_ports_are_reused_more_than_ten_times_a_minute(tmp_path: Path) -> None:
    found = [a for a in alerts(reused(12).write(tmp_path / "p6.pcap")) if a.rule_id == "P6"]
    assert [(a.severity, a.count, a.src, a.dst, a.dport) for a in found] == [("notice", 11, A, B, 80)]
    assert "P6" not in rules(reused(11).write(tmp_path / "p6-ok.pcap"))  # 10 reuses
