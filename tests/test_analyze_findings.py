"""Per-connection findings (issue 17 item 1): each kind from a capture built with scapy, exactly.

Every test builds a conversation packet by packet (tests/tcpbuild.py) and checks the
findings of its connection: kind, severity, side and the numbers behind them, then the
P7 alert they raise. The two captures of the issue (seven 0.65 s zero-window stalls,
70 % of the connection's life; six connections of which three were refused and three
reset) are checked end to end through `nettrail analyze` in every xo style, and the
text style against a golden file (NETTRAIL_REGEN_GOLDEN=1 rewrites it; review the diff).
Keep in sync with: analysis/flows/findings.py, docs/analyze.md ("Findings").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from scapy.all import ICMP, IP, UDP, Ether, Raw

from analysis.capture.pcap import CaptureReader
from analysis.flows.capture_flows import CapturePipeline
from tests import capwriter as cw
from tests.tcpbuild import MS, T0, A, B, Conv
from translators.packet import decode_batch
from translators.records import Alert, Connection, Finding

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).parent / "golden" / "text"
REGEN = os.environ.get("NETTRAIL_REGEN_GOLDEN") == "1"
S = 1000 * MS


def analyse(path: Path) -> tuple[list[Connection], list[Alert]]:
    pipe = CapturePipeline(path.name, "0" * 16)
    with CaptureReader(str(path)) as r:
        for batch in r.batches():
            for _ in pipe.feed(decode_batch(batch)):
                pass
    return pipe.connections(), pipe.alerts()


def findings_of(path: Path) -> list[Finding]:
    conns, _ = analyse(path)
    assert len(conns) == 1
    assert conns[0].findings is not None
    return conns[0].findings


def brief(found: list[Finding]) -> list[tuple[str | None, ...]]:
    return [(f.kind, f.severity, f.side) for f in found]


def zero_window_stalls(episodes: int = 7, stall: int = 650 * MS, gap: int = 278 * MS) -> Conv:
    """A bulk transfer stalled `episodes` times: the receiver closes its window, the sender
    probes once (Linux's zero-length probe one below snd_una), the window reopens `stall`
    after it closed. With the defaults: 7 x 0.65 s = 4.55 s of a 6.5 s life (70 %)."""
    c = Conv()
    c.handshake()  # frames 1-3, 1 ms apart: the life starts at frame 1
    for _ in range(episodes):
        c.send(A, "PA", b"z" * 1000, dt=gap - 5 * MS if _ == 0 else gap)
        c.send(B, "A", win=0)  # the receiver's buffer is full
        c.send(A, "A", seq=c.seq[A] - 1, dt=stall // 2)  # probe
        c.send(B, "A", win=0)
        c.send(B, "A", win=1000, dt=stall - stall // 2 - MS)  # reopened
    return c


def test_a_zero_window_stall_of_70_percent_is_a_warning_and_raises_p7_not_p4(tmp_path: Path) -> None:
    conns, alerts = analyse(zero_window_stalls().write(tmp_path / "zw.pcap"))
    (conn,) = conns
    assert conn.duration == 6.5
    assert conn.findings is not None
    (zw,) = [f for f in conn.findings if f.kind == "zero_window"]
    assert (zw.severity, zw.side, zw.count, zw.seconds, zw.ratio) == ("warning", "resp", 7, 4.55, 0.7)
    assert zw.frame == 5 and zw.ts == (T0 + 277 * MS) / 1e9
    assert zw.message == (
        "zero-window stall: the responder closed its receive window 7 times, stalling the originator "
        "for 4.55 s in all (70% of the connection's life)"
    )
    assert [a.rule_id for a in alerts] == ["P7"]  # P4 wants >= 3 probes or >= 1 s per episode
    assert (alerts[0].severity, alerts[0].message, alerts[0].evidence) == ("warning", zw.message, [5])


def test_short_zero_windows_are_info_and_raise_nothing(tmp_path: Path) -> None:
    conns, alerts = analyse(zero_window_stalls(episodes=2, stall=20 * MS, gap=500 * MS).write(tmp_path / "zw.pcap"))
    assert conns[0].findings is not None
    assert brief(conns[0].findings) == [("zero_window", "info", "resp")]
    assert conns[0].findings[0].ratio == round(0.04 / 1.039, 4)  # 2 x 20 ms of a 1.039 s life
    assert alerts == []


def test_refused(tmp_path: Path) -> None:
    c = Conv()
    c.send(A, "S")
    c.send(B, "RA", ack=c.seq[A])
    (f,) = findings_of(c.write(tmp_path / "rej.pcap"))
    assert (f.kind, f.severity, f.side, f.frame) == ("refused", "notice", "resp", 2)
    assert f.message == "refused: the responder answered the SYN with a reset (nothing listening, or a firewall)"


def test_no_answer_and_the_syn_retries_behind_it(tmp_path: Path) -> None:
    c = Conv()
    for dt in (MS, S, 2 * S):  # Linux's backoff: 1 s, then 2 s
        c.send(A, "S", seq=1000, dt=dt)
    found = findings_of(c.write(tmp_path / "s0.pcap"))
    assert brief(found) == [("no_answer", "notice", "resp"), ("syn_retries", "notice", "orig")]
    assert (found[0].count, found[0].seconds) == (3, 3.0)
    assert (found[1].count, found[1].seconds) == (2, 3.0)
    assert found[1].message == "SYN sent 3 times: 2 retries over 3.00 s before giving up"


def test_a_syn_retry_before_a_successful_handshake(tmp_path: Path) -> None:
    c = Conv()
    c.send(A, "S", seq=1000)
    c.send(A, "S", seq=1000, dt=S)
    c.seq[A] = 1001
    c.send(B, "SA")
    c.send(A, "A")
    (f,) = findings_of(c.write(tmp_path / "retry.pcap"))
    assert (f.kind, f.severity, f.side, f.count, f.seconds) == ("syn_retries", "notice", "orig", 1, 1.0)
    assert f.message == "SYN sent 2 times: 1 retry over 1.00 s before the answer"


def test_handshake_incomplete(tmp_path: Path) -> None:
    c = Conv()
    c.send(A, "S")
    c.send(B, "SA")
    (f,) = findings_of(c.write(tmp_path / "hs.pcap"))
    assert (f.kind, f.severity, f.side) == ("handshake_incomplete", "notice", "orig")


def test_reset_says_by_whom_in_which_state_after_how_much_data(tmp_path: Path) -> None:
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"q" * 300)
    c.send(B, "PA", b"r" * 1200)
    c.send(A, "RA")
    (f,) = findings_of(c.write(tmp_path / "rsto.pcap"))
    assert (f.kind, f.severity, f.side, f.state, f.data_bytes, f.count, f.frame) == (
        "reset", "notice", "orig", "established", 1500, 1, 6,
    )  # fmt: skip
    assert (
        f.message
        == "reset by the originator while established, after 300 bytes from the originator and 1,200 bytes from the responder"
    )


def test_reset_during_the_handshake_and_after_both_closed(tmp_path: Path) -> None:
    c = Conv()
    c.send(A, "S")
    c.send(A, "R")
    (f,) = findings_of(c.write(tmp_path / "rstos0.pcap"))
    assert (f.kind, f.severity, f.side, f.state, f.data_bytes) == ("reset", "notice", "orig", "handshake", 0)
    assert f.message == "reset by the originator during the handshake, before any data"
    c = Conv()
    c.handshake()
    c.send(A, "FA")
    c.send(B, "FA")
    c.send(A, "A")
    c.send(B, "R")  # e.g. a late segment reaching a socket already gone
    (f,) = findings_of(c.write(tmp_path / "late.pcap"))
    assert (f.kind, f.severity, f.side, f.state) == ("reset", "info", "resp", "closed")


def test_retransmissions_by_cause(tmp_path: Path) -> None:
    c = Conv()
    c.handshake()
    start = c.seq[A]
    for _ in range(25):
        c.send(A, "PA", b"d" * 100)
    c.send(B, "A", ack=start + 100)  # the first segment arrived; the second is missing
    for _ in range(3):
        c.send(B, "A", ack=start + 100)  # duplicate ACKs
    c.send(A, "PA", b"d" * 100, seq=start + 100)  # fast retransmission
    c.send(A, "PA", b"d" * 100, seq=start + 300, dt=300 * MS)  # a timeout: last sent > 200 ms before
    c.send(B, "A", ack=start + 2500)
    c.send(A, "PA", b"d" * 100, seq=start, dt=5 * MS)  # spurious: acknowledged already
    (f,) = findings_of(c.write(tmp_path / "retx.pcap"))
    assert (f.kind, f.severity, f.side, f.count, f.fast, f.timeout, f.spurious) == (
        "retransmissions", "notice", "orig", 3, 1, 1, 1,
    )  # fmt: skip
    assert f.ratio == round(3 / 28, 4)
    assert (
        f.message
        == "3 retransmissions by the originator: 10.7% of its 28 data segments (1 fast, 1 after a timeout, 1 spurious)"
    )


def test_many_retransmissions_are_a_warning(tmp_path: Path) -> None:
    c = Conv()
    c.handshake()
    start = c.seq[A]
    for _ in range(25):
        c.send(A, "PA", b"d" * 100)
    for k in range(5):
        c.send(A, "PA", b"d" * 100, seq=start + 100 * k, dt=300 * MS)
    c.send(B, "A", ack=c.seq[A])
    conns, alerts = analyse(c.write(tmp_path / "p1.pcap"))
    assert conns[0].findings is not None
    (f,) = conns[0].findings
    assert (f.kind, f.severity, f.count, f.timeout, f.fast, f.spurious) == ("retransmissions", "warning", 5, 5, 0, 0)
    assert [a.rule_id for a in alerts] == ["P1"]  # P7 does not repeat an alert already as severe


def test_half_open_one_sided_and_incomplete_captures(tmp_path: Path) -> None:
    c = Conv()
    c.send(A, "S")
    c.send(A, "FA", dt=S)
    assert brief(findings_of(c.write(tmp_path / "sh.pcap"))) == [("half_open", "notice", "orig")]
    c = Conv()
    c.seq[A] = 7000
    for _ in range(3):
        c.send(A, "PA", b"m" * 100, ack=9000)  # midstream, one direction only
    found = findings_of(c.write(tmp_path / "oneway.pcap"))
    assert brief(found) == [("one_sided", "info", "resp"), ("capture_incomplete", "info", None)]
    assert found[0].message.startswith("one-sided: only the originator's packets are in the capture")
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"g" * 100)
    c.seq[A] += 400  # four segments the capture missed
    c.send(A, "PA", b"g" * 100)
    c.send(B, "A", ack=c.seq[A])
    (f,) = findings_of(c.write(tmp_path / "gap.pcap"))
    assert (f.kind, f.severity, f.count, f.data_bytes, f.frame) == ("capture_incomplete", "info", 2, 400, 5)
    assert f.message == (
        "capture incomplete: 2 packets point at segments the capture missed (400 bytes known missing; not network loss)"
    )  # the segment after the hole, and the ACK of data never seen


def test_a_clean_connection_has_no_findings(tmp_path: Path) -> None:
    c = Conv()
    c.handshake()
    c.send(A, "PA", b"x" * 100)
    c.send(B, "A")
    c.send(A, "FA")
    c.send(B, "FA")
    c.send(A, "A")
    conns, alerts = analyse(c.write(tmp_path / "clean.pcap"))
    assert conns[0].findings == [] and alerts == []


# --- the captures through the command ---------------------------------------------------------


def refused_and_reset(path: Path, extra: list[tuple[int, bytes]] | None = None) -> Path:
    """Six connections to one server: three refused, three reset by the server after a request."""
    frames: list[tuple[int, bytes]] = list(extra or [])
    for k in range(6):
        c = Conv(sport=41000 + k, dport=8080)
        c.t = T0 + k * 100 * MS
        if k % 2 == 0:
            c.send(A, "S")
            c.send(B, "RA", ack=c.seq[A])
        else:
            c.handshake()
            c.send(A, "PA", b"GET / HTTP/1.1\r\n\r\n")
            c.send(B, "RA")
        frames += c.frames
    frames.sort(key=lambda f: f[0])
    path.write_bytes(cw.pcap([cw.Pkt(data, ts) for ts, data in frames], nano=True))
    return path


def run(path: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "nettrail", "analyze", path.name, *args], cwd=path.parent, capture_output=True,
        text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    return proc.stdout


def test_three_refused_and_three_reset_connections_each_say_so_and_raise_notices(tmp_path: Path) -> None:
    doc = json.loads(run(refused_and_reset(tmp_path / "six.pcap"), "--libxo", "json"))["analyze"]
    found = [[(f["kind"], f["severity"], f["side"], f["state"]) for f in c["findings"]] for c in doc["connection"]]
    refused, reset = ("refused", "notice", "resp", None), ("reset", "notice", "resp", "established")
    assert found == [[refused], [reset]] * 3
    assert [(a["rule_id"], a["severity"], a["count"], a["dport"], a["evidence"]) for a in doc["alert"]] == [
        ("P7", "notice", 3, 8080, [2, 9, 16]),
        ("P7", "notice", 3, 8080, [7, 14, 21]),
    ]  # one alert per server and kind of finding: the refused connects, the resets
    assert doc["alert"][0]["message"] == (
        "refused: the responder answered the SYN with a reset (nothing listening, or a firewall); "
        "and 2 more connections to 10.0.0.2 the same way"
    )
    assert doc["connection"][1]["findings"][0]["message"] == (
        "reset by the responder while established, after 18 bytes from the originator and 0 bytes from the responder"
    )


def test_findings_in_xml_and_html(tmp_path: Path) -> None:
    path = refused_and_reset(tmp_path / "six.pcap")
    xml = run(path, "--libxo", "xml")
    assert xml.count("<findings><kind>refused</kind><severity>notice</severity>") == 3
    assert "<state>established</state>" in xml
    html = run(path, "--libxo", "html")
    assert html.count('data-tag="findings">notice: refused: the responder answered the SYN') == 3


def test_text_style_golden_file(tmp_path: Path) -> None:
    """Both captures of the issue in one file, as a person reads them."""
    zw = zero_window_stalls()
    path = refused_and_reset(tmp_path / "issue.pcap", [(ts + 10 * S, data) for ts, data in zw.frames])
    out = run(path)
    golden = GOLDEN / "analyze-findings.text.out"
    if REGEN:
        golden.write_text(out, encoding="utf-8")
    assert out == golden.read_text(encoding="utf-8"), "differs; regenerate if the change is intended"


def test_icmp_unreachable_is_a_notice_on_a_udp_flow(tmp_path: Path) -> None:
    dgram = IP(src=A, dst=B) / UDP(sport=5353, dport=9) / Raw(b"ping")
    icmp = IP(src=B, dst=A) / ICMP(type=3, code=3) / bytes(dgram)[:28]
    frames = [cw.Pkt(bytes(Ether() / dgram), T0), cw.Pkt(bytes(Ether() / icmp), T0 + MS)]
    path = tmp_path / "udp.pcap"
    path.write_bytes(cw.pcap(frames, nano=True))
    conns, _ = analyse(path)
    assert conns[0].findings is not None
    assert brief(conns[0].findings) == [("icmp_unreachable", "notice", None), ("one_sided", "info", "orig")]
    assert conns[0].findings[0].message == "ICMP port-unreachable once: a router or the host refused it"
