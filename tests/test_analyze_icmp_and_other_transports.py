"""ICMP and the other IP transports are connections of their own, as rows of Zeek's conn.log are.

Scapy builds pings, an unreachable, ICMPv6 echo and neighbour discovery, SCTP, ESP, an
unwrappable GRE and fragments; `nettrail analyze` must list each flow once with Zeek's
ports (ICMP type and counterpart type or code; 0 for other transports), orientation,
packet, payload and IP byte counts, conn_state OTH and no history, in every --libxo
style, in `--zeek` and in the stored connections; TCP and UDP rows stay what they were.
Keep in sync with: analysis/flows/ip_flows.py, xo/zeek.py, docs/analyze.md ("ICMP and other transports").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scapy.all import (
    GRE,
    ICMP,
    IP,
    TCP,
    UDP,
    Ether,
    ICMPv6EchoReply,
    ICMPv6EchoRequest,
    ICMPv6ND_NA,
    ICMPv6ND_NS,
    IPv6,
    Raw,
    fragment,
)

from tests import capwriter as cw

ROOT = Path(__file__).resolve().parent.parent
A, B, C = "192.0.2.1", "192.0.2.2", "198.51.100.9"
A6, B6 = "2001:db8::1", "2001:db8::2"
T0 = 1_700_000_000_000_000_000
KEYS = ("proto", "src", "sport", "dst", "dport", "packets_orig", "packets_resp", "bytes_orig", "bytes_resp",
        "wire_bytes_orig", "wire_bytes_resp", "conn_state", "history", "duration", "ip_ver", "provider")  # fmt: skip


def run(tmp_path: Path, packets: list[Any], *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "cap.pcap"
    path.write_bytes(cw.pcap([cw.Pkt(bytes(p), T0 + i * 1_000_000) for i, p in enumerate(packets)], 101))
    proc = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", str(path), *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc


def rows(tmp_path: Path, packets: list[Any]) -> list[dict[str, Any]]:
    out = json.loads(run(tmp_path, packets, "--libxo", "json").stdout)["analyze"]["connection"]
    return [{k: c.get(k) for k in KEYS} for c in out]


def ping(src: str, dst: str, ident: int, size: int = 56) -> list[Any]:
    return [
        IP(src=src, dst=dst) / ICMP(type=8, id=ident, seq=1) / Raw(b"p" * size),
        IP(src=dst, dst=src) / ICMP(type=0, id=ident, seq=1) / Raw(b"p" * size),
    ]


def icmp_row(**kw: Any) -> dict[str, Any]:
    base = {"proto": "icmp", "conn_state": "OTH", "history": None, "ip_ver": 4, "provider": "ip"}
    return {k: {**base, **kw}.get(k) for k in KEYS}


def test_pings_of_two_identifiers_are_one_flow_from_type_8_to_type_0(tmp_path: Path) -> None:
    got = rows(tmp_path, ping(A, B, 1) + ping(A, B, 2))
    assert got == [
        icmp_row(src=A, sport=8, dst=B, dport=0, packets_orig=2, packets_resp=2, bytes_orig=112, bytes_resp=112,
                 wire_bytes_orig=168, wire_bytes_resp=168, duration=0.003),
    ]  # fmt: skip


def test_a_reply_seen_first_makes_the_replier_the_originator(tmp_path: Path) -> None:
    request, reply = ping(A, B, 7, size=10)
    assert rows(tmp_path, [reply, request]) == [
        icmp_row(src=B, sport=0, dst=A, dport=8, packets_orig=1, packets_resp=1, bytes_orig=10, bytes_resp=10,
                 wire_bytes_orig=38, wire_bytes_resp=38, duration=0.001),
    ]  # fmt: skip


def test_an_unreachable_is_its_own_row_and_still_marks_the_flow_it_quotes(tmp_path: Path) -> None:
    query = IP(src=A, dst=B) / UDP(sport=5353, dport=53) / Raw(b"q" * 12)
    answer = IP(src=B, dst=A) / ICMP(type=3, code=3) / bytes(query)[:28]
    out = json.loads(run(tmp_path, [query, answer], "--libxo", "json").stdout)["analyze"]
    udp, icmp = out["connection"]
    assert (udp["proto"], udp["packets_orig"], udp["icmp_error"], udp["icmp_errors"]) == (
        "udp",
        1,
        "port-unreachable",
        1,
    )
    assert {k: icmp.get(k) for k in KEYS} == icmp_row(
        src=B, sport=3, dst=A, dport=3, packets_orig=1, packets_resp=0, bytes_orig=28, bytes_resp=0,
        wire_bytes_orig=56, wire_bytes_resp=0, duration=0.0,
    )  # fmt: skip
    assert out["totals"]["icmp_unreachable"] == 1


def test_icmpv6_echo_and_neighbour_discovery_pair_up_by_zeeks_counterparts(tmp_path: Path) -> None:
    packets = [
        IPv6(src=A6, dst=B6) / ICMPv6ND_NS(tgt=B6),
        IPv6(src=B6, dst=A6) / ICMPv6ND_NA(tgt=B6),
        IPv6(src=A6, dst=B6) / ICMPv6EchoRequest(id=1, data=b"e" * 8),
        IPv6(src=B6, dst=A6) / ICMPv6EchoReply(id=1, data=b"e" * 8),
    ]
    six = {"proto": "icmp6", "ip_ver": 6}
    assert rows(tmp_path, packets) == [
        icmp_row(**six, src=A6, sport=135, dst=B6, dport=136, packets_orig=1, packets_resp=1, bytes_orig=16,
                 bytes_resp=16, wire_bytes_orig=64, wire_bytes_resp=64, duration=0.001),
        icmp_row(**six, src=A6, sport=128, dst=B6, dport=129, packets_orig=1, packets_resp=1, bytes_orig=8,
                 bytes_resp=8, wire_bytes_orig=56, wire_bytes_resp=56, duration=0.001),
    ]  # fmt: skip


def test_other_transports_are_one_row_per_address_pair_and_protocol_with_ports_0(tmp_path: Path) -> None:
    packets = [
        IP(src=A, dst=B, proto=132) / Raw(b"s" * 20),
        IP(src=B, dst=A, proto=132) / Raw(b"s" * 30),
        IP(src=A, dst=B, proto=132) / Raw(b"s" * 40),
        IP(src=A, dst=C, proto=50) / Raw(b"e" * 40),
        IP(src=A, dst=B, proto=47) / GRE(proto=0x88BE) / Raw(b"erspan"),  # GRE nettrail cannot unwrap
        IP(src=A, dst=B, proto=253) / Raw(b"x"),  # experimental: no IANA keyword
        *fragment(IP(src=A, dst=B, proto=132) / Raw(b"f" * 3000), fragsize=1480),  # no transport to name
    ]
    other = {"conn_state": "OTH", "history": None, "ip_ver": 4, "provider": "ip", "sport": 0, "dport": 0,
             "bytes_orig": None, "bytes_resp": None}  # fmt: skip
    got = rows(tmp_path, packets)
    assert got == [
        {**other, "proto": "sctp", "src": A, "dst": B, "packets_orig": 2, "packets_resp": 1, "wire_bytes_orig": 100,
         "wire_bytes_resp": 50, "duration": 0.002},
        {**other, "proto": "esp", "src": A, "dst": C, "packets_orig": 1, "packets_resp": 0, "wire_bytes_orig": 60,
         "wire_bytes_resp": 0, "duration": 0.0},
        {**other, "proto": "gre", "src": A, "dst": B, "packets_orig": 1, "packets_resp": 0, "wire_bytes_orig": 30,
         "wire_bytes_resp": 0, "duration": 0.0},
        {**other, "proto": "ip-253", "src": A, "dst": B, "packets_orig": 1, "packets_resp": 0, "wire_bytes_orig": 21,
         "wire_bytes_resp": 0, "duration": 0.0},
    ]  # fmt: skip


def test_tcp_and_udp_rows_are_unchanged_by_icmp_beside_them(tmp_path: Path) -> None:
    tcp_udp = [
        IP(src=A, dst=B) / TCP(sport=40000, dport=443, flags="S", seq=100),
        IP(src=B, dst=A) / TCP(sport=443, dport=40000, flags="SA", seq=900, ack=101),
        IP(src=A, dst=B) / UDP(sport=5000, dport=53) / Raw(b"u" * 9),
    ]
    alone = json.loads(run(tmp_path, tcp_udp, "--libxo", "json").stdout)["analyze"]["connection"]
    mixed = json.loads(run(tmp_path, ping(A, B, 1) + tcp_udp, "--libxo", "json").stdout)["analyze"]["connection"]
    assert [c["proto"] for c in mixed] == ["tcp", "udp", "icmp"]
    timeless = ("start", "end", "ts_ns", "ts_wall", "seq", "conn_uuid", "boot_id", "duration")
    assert [{k: v for k, v in c.items() if k not in timeless} for c in mixed[:2]] == [
        {k: v for k, v in c.items() if k not in timeless} for c in alone
    ]


def test_zeek_conn_log_writes_them_as_zeek_does(tmp_path: Path) -> None:
    packets = ping(A, B, 1, size=10) + [
        IP(src=B, dst=A) / ICMP(type=11, code=0) / bytes(IP(src=A, dst=C) / UDP())[:28],
        IPv6(src=A6, dst=B6) / ICMPv6EchoRequest(data=b"e" * 8),
        IP(src=A, dst=B, proto=132) / Raw(b"s" * 20),
        IP(src=B, dst=A, proto=132) / Raw(b"s" * 30),
    ]
    lines = [line.split("\t") for line in run(tmp_path, packets, "--zeek").stdout.splitlines() if line[0] != "#"]
    # id.orig_h .. proto, then duration .. history, orig_pkts .. resp_ip_bytes, ip_proto
    assert [line[2:7] + line[8:16] + line[16:20] + line[21:] for line in lines] == [
        [A, "8", B, "0", "icmp", "0.001000", "10", "10", "OTH", "-", "-", "0", "-", "1", "38", "1", "38", "1"],
        [B, "11", A, "0", "icmp", "-", "-", "-", "OTH", "-", "-", "0", "-", "1", "56", "0", "0", "1"],
        [A6, "128", B6, "129", "icmp", "-", "-", "-", "OTH", "-", "-", "0", "-", "1", "56", "0", "0", "58"],
        [A, "0", B, "0", "unknown_transport", "0.001000", "-", "-", "OTH", "-", "-", "0", "-", "1", "40", "1", "50",
         "132"],
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        ("text", "icmp   192.0.2.1:8  192.0.2.2:0  OTH        1"),
        ("xml", "<proto>icmp</proto>"),
        ("html", 'data-tag="proto">icmp</div>'),
    ],
)
def test_every_libxo_style_shows_the_icmp_row(tmp_path: Path, style: str, expected: str) -> None:
    assert expected in run(tmp_path, ping(A, B, 1, size=10), "--libxo", style).stdout


@pytest.mark.django_db
def test_stored_captures_keep_the_icmp_and_other_rows(tmp_path: Path) -> None:
    from nettrail.cli import main
    from webapp.traces.models import Connection, ConnectionSummary

    path = tmp_path / "mixed.pcap"
    packets = ping(A, B, 1, size=10) + [IP(src=A, dst=B, proto=132) / Raw(b"s" * 20)]
    path.write_bytes(cw.pcap([cw.Pkt(bytes(p), T0 + i * 1_000_000) for i, p in enumerate(packets)], 101))
    assert main(["analyze", str(path), "--store", "--libxo", "json"]) == 0
    conns = Connection.objects.filter(host_id="mixed.pcap").order_by("proto")
    assert [(c.proto, c.src, c.sport, c.dst, c.dport, c.bytes_orig, c.packets_out, c.packets_in, c.conn_state)
            for c in conns] == [
        ("icmp", A, 8, B, 0, 10, 1, 1, "OTH"),
        ("sctp", A, 0, B, 0, None, 1, 0, "OTH"),
    ]  # fmt: skip
    summaries = ConnectionSummary.objects.filter(host_id="mixed.pcap").order_by("proto")
    assert [(s.proto, s.wire_bytes_orig, s.wire_bytes_resp) for s in summaries] == [("icmp", 38, 38), ("sctp", 40, 0)]


def test_the_dashboard_filter_takes_every_proto_a_connection_may_have() -> None:
    from webapp.dashboard.filterlang import Cond, FilterError, parse

    assert parse("proto ICMP6") == Cond("proto", "=", "icmp6")
    assert parse("proto ip-253") == Cond("proto", "=", "ip-253")
    with pytest.raises(FilterError, match="proto is tcp, udp, udplite, icmp, icmp6 or an IP protocol"):
        parse("proto ip-256")


def test_a_capture_big_enough_for_the_forked_numpy_decoder_gives_the_same_rows(tmp_path: Path) -> None:
    """Over 1 MiB a child process decodes with numpy and hands over columns without the
    packet bytes (translators/packet_decoded.py, portable): ICMP type, code and size must
    come through, and the data-centre tags of item 3 must decode there too."""
    from tests.test_linklayers import MACS, WRAPS, conversation

    pings = [p for n in range(4000) for p in ping(A, B, n, size=150)]
    frames = [WRAPS["fabricpath"][1](p) for p in pings]  # 4000 x 2 x 200 bytes: over 1 MiB
    frames += [WRAPS[name][1](p) for name in ("pbb", "vntag-then-vlan") for p in conversation()]
    frames += [bytes(Ether(**MACS) / IP(src=A, dst=C, proto=132) / Raw(b"s" * 20))]
    path = tmp_path / "big.pcap"
    path.write_bytes(cw.pcap([cw.Pkt(f, T0 + i * 1000) for i, f in enumerate(frames)], 1))
    assert path.stat().st_size > 1 << 20
    proc = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", str(path), "--libxo", "json"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    out = json.loads(proc.stdout)["analyze"]
    got = [(c["proto"], c["src"], c["sport"], c["dst"], c["dport"], c["packets_orig"], c["packets_resp"],
            c["bytes_orig"], c["bytes_resp"], c["wire_bytes_orig"]) for c in out["connection"]]  # fmt: skip
    assert got == [
        ("tcp", A, 40000, B, 443, 6, 4, 200, 0, 440),  # the same conversation under PBB and under VN-Tag
        ("icmp", A, 8, B, 0, 4000, 4000, 600_000, 600_000, 4000 * 178),
        ("sctp", A, 0, C, 0, 1, 0, None, None, 40),
    ]
    assert (out["totals"]["packets"], out["totals"]["packets_non_ip"], out["totals"]["undecoded"]) == (8011, 0, [])
