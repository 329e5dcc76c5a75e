"""Every link layer a user will meet: each built with scapy, analysed by `nettrail analyze`.

One short TCP conversation (handshake, 100 bytes of data, an ACK) is wrapped in each link
layer or tunnel and written with its pcap link type; the analysis must find exactly that
one connection with its counts and nothing undecoded. Link layers nettrail cannot read
are counted by what they were, in `totals.undecoded` and on stderr.
Keep in sync with: translators/linklayers.py, translators/packet.py, docs/analyze.md (Input).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from scapy.all import (
    ARP,
    GRE,
    IP,
    LLC,
    PPP,
    SNAP,
    TCP,
    UDP,
    CookedLinux,
    CookedLinuxV2,
    Dot1AD,
    Dot1Q,
    Dot11,
    Dot11QoS,
    Ether,
    IPv6,
    PPPoE,
    RadioTap,
    Raw,
)
from scapy.contrib.mpls import MPLS
from scapy.layers.vxlan import VXLAN

from tests import capwriter as cw

ROOT = Path(__file__).resolve().parent.parent
A, B = "192.0.2.1", "192.0.2.2"
MACS = {"src": "02:00:00:00:00:01", "dst": "02:00:00:00:00:02"}
WIFI = {"addr1": "02:00:00:00:00:02", "addr2": "02:00:00:00:00:01", "addr3": "02:00:00:00:00:03"}


def conversation(v6: bool = False) -> list[Any]:
    """SYN, SYN-ACK, ACK, 100 bytes, ACK: 3 packets from the originator, 2 back."""
    a, b = ("2001:db8::1", "2001:db8::2") if v6 else (A, B)

    def ip(src: str, dst: str) -> Any:
        return IPv6(src=src, dst=dst) if v6 else IP(src=src, dst=dst)

    return [
        ip(a, b) / TCP(sport=40000, dport=443, flags="S", seq=100),
        ip(b, a) / TCP(sport=443, dport=40000, flags="SA", seq=900, ack=101),
        ip(a, b) / TCP(sport=40000, dport=443, flags="A", seq=101, ack=901),
        ip(a, b) / TCP(sport=40000, dport=443, flags="PA", seq=101, ack=901) / Raw(b"d" * 100),
        ip(b, a) / TCP(sport=443, dport=40000, flags="A", seq=901, ack=201),
    ]


def nflog(pkt: Any) -> bytes:
    """NFLOG (link type 239): family AF_INET, version 0, resource id, a prefix TLV, the payload TLV."""
    data = bytes(pkt)
    prefix = b"test\x00"
    tlvs = struct.pack("<HH", 4 + len(prefix), 10) + prefix + b"\x00" * (-(4 + len(prefix)) % 4)
    tlvs += struct.pack("<HH", 4 + len(data), 9) + data + b"\x00" * (-(4 + len(data)) % 4)
    return struct.pack(">BBH", 2, 0, 0) + tlvs


def outer_ip(proto: int) -> Any:
    return Ether(**MACS) / IP(src="198.51.100.1", dst="198.51.100.2", proto=proto)


WRAPS: dict[str, tuple[int, Callable[[Any], bytes]]] = {
    "ethernet": (1, lambda p: bytes(Ether(**MACS) / p)),
    "vlan": (1, lambda p: bytes(Ether(**MACS) / Dot1Q(vlan=5) / p)),
    "qinq": (1, lambda p: bytes(Ether(**MACS) / Dot1AD(vlan=1) / Dot1Q(vlan=2) / p)),
    "three-tags": (1, lambda p: bytes(Ether(**MACS) / Dot1AD(vlan=1) / Dot1Q(vlan=2) / Dot1Q(vlan=3) / p)),
    "pppoe": (1, lambda p: bytes(Ether(**MACS) / PPPoE(sessionid=7) / PPP(proto=0x21) / p)),
    "pppoe-qinq": (1, lambda p: bytes(Ether(**MACS) / Dot1AD(vlan=1) / Dot1Q(vlan=2) / PPPoE() / PPP(proto=0x21) / p)),
    "mpls": (1, lambda p: bytes(Ether(**MACS) / MPLS(label=100, s=0) / MPLS(label=200, s=1) / p)),
    "llc-snap": (1, lambda p: bytes(Ether(**MACS, type=8 + len(p) + 0) / LLC() / SNAP(code=0x0800) / p)),
    "ppp": (9, lambda p: b"\xff\x03\x00\x21" + bytes(p)),
    "ppp-compressed": (9, lambda p: b"\x21" + bytes(p)),
    "ppp-hdlc": (50, lambda p: b"\xff\x03\x00\x21" + bytes(p)),
    "pppoe-link": (51, lambda p: bytes(PPPoE(sessionid=7) / PPP(proto=0x21) / p)),
    "wifi": (105, lambda p: bytes(Dot11(type=2, subtype=0, FCfield=1, **WIFI) / LLC() / SNAP(code=0x800) / p)),
    "wifi-qos-4addr": (
        105,
        lambda p: bytes(
            Dot11(type=2, subtype=8, FCfield=3, addr4="02:00:00:00:00:04", **WIFI)
            / Dot11QoS()
            / LLC()
            / SNAP(code=0x800)
            / p
        ),
    ),
    "radiotap": (127, lambda p: bytes(RadioTap() / Dot11(type=2, subtype=0, **WIFI) / LLC() / SNAP(code=0x800) / p)),
    "nflog": (239, nflog),
    "sll": (113, lambda p: bytes(CookedLinux(proto=0x800) / p)),
    "sll2": (276, lambda p: bytes(CookedLinuxV2(proto=0x800) / p)),
    "raw-ip": (101, bytes),
    "null": (0, lambda p: struct.pack("<I", 2) + bytes(p)),
    "ip-in-ip": (1, lambda p: bytes(outer_ip(4) / p)),
    "gre": (1, lambda p: bytes(outer_ip(47) / GRE(proto=0x0800) / p)),
    "gre-key-seq": (1, lambda p: bytes(outer_ip(47) / GRE(key_present=1, key=9, seqnum_present=1, seqence_number=3, proto=0x0800) / p)),
    "gre-ethernet": (1, lambda p: bytes(outer_ip(47) / GRE(proto=0x6558) / Ether(**MACS) / p)),
    "vxlan": (1, lambda p: bytes(Ether(**MACS) / IP(src="198.51.100.1", dst="198.51.100.2") / UDP(sport=50000, dport=4789) / VXLAN(vni=42) / Ether(**MACS) / p)),
    "gre-in-vlan-mpls": (1, lambda p: bytes(Ether(**MACS) / Dot1Q(vlan=9) / MPLS(label=5, s=1) / IP(src="198.51.100.1", dst="198.51.100.2", proto=47) / GRE(proto=0x0800) / p)),
}  # fmt: skip


def analyze(tmp_path: Path, frames: list[bytes], linktype: int) -> tuple[dict[str, Any], str]:
    path = tmp_path / "cap.pcap"
    path.write_bytes(
        cw.pcap([cw.Pkt(f, 1_700_000_000_000_000_000 + i * 1_000_000) for i, f in enumerate(frames)], linktype)
    )
    proc = subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", str(path), "--libxo", "json"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["analyze"], proc.stderr


@pytest.mark.parametrize("name", WRAPS)
def test_a_tcp_connection_is_found_inside_every_link_layer_and_tunnel(tmp_path: Path, name: str) -> None:
    linktype, wrap = WRAPS[name]
    out, err = analyze(tmp_path, [wrap(p) for p in conversation()], linktype)
    assert err == ""
    [conn] = out["connection"]
    got = {k: conn[k] for k in ("proto", "src", "sport", "dst", "dport", "packets_orig", "packets_resp", "bytes_orig")}
    assert got == {"proto": "tcp", "src": A, "sport": 40000, "dst": B, "dport": 443, "packets_orig": 3,
                   "packets_resp": 2, "bytes_orig": 100}  # fmt: skip
    assert (conn["conn_state"], conn["history"]) == ("S1", "ShADa")
    t = out["totals"]
    assert (t["packets"], t["packets_tcp"], t["packets_udp"], t["packets_non_ip"], t["undecoded"]) == (5, 5, 0, 0, [])


@pytest.mark.parametrize("name", ["vlan", "pppoe-qinq", "mpls", "gre", "vxlan", "radiotap", "sll2", "nflog"])
def test_ipv6_inside_them_too(tmp_path: Path, name: str) -> None:
    linktype, wrap = WRAPS[name]
    six = {  # the same layers with the IPv6 codes
        "vlan": lambda p: bytes(Ether(**MACS) / Dot1Q(vlan=5) / p),
        "pppoe-qinq": lambda p: bytes(Ether(**MACS) / Dot1AD() / Dot1Q() / PPPoE() / PPP(proto=0x57) / p),
        "mpls": lambda p: bytes(Ether(**MACS) / MPLS(label=100, s=1) / p),
        "gre": lambda p: bytes(outer_ip(47) / GRE(proto=0x86DD) / p),
        "vxlan": lambda p: bytes(WRAPS["vxlan"][1](p)),
        "radiotap": lambda p: bytes(RadioTap() / Dot11(type=2, **WIFI) / LLC() / SNAP(code=0x86DD) / p),
        "sll2": lambda p: bytes(CookedLinuxV2(proto=0x86DD) / p),
        "nflog": lambda p: b"\x0a" + nflog(p)[1:],
    }[name]
    out, err = analyze(tmp_path, [six(p) for p in conversation(v6=True)], linktype)
    assert err == ""
    [conn] = out["connection"]
    assert (conn["src"], conn["dst"], conn["ip_ver"], conn["packets_orig"], conn["conn_state"]) == (
        "2001:db8::1", "2001:db8::2", 6, 3, "S1",
    )  # fmt: skip


def test_an_unreadable_link_type_is_counted_and_reported_not_silently_empty(tmp_path: Path) -> None:
    frames = [b"\x00" * 13 + bytes(p) for p in conversation()]  # FDDI (link type 10): not decoded
    out, err = analyze(tmp_path, frames, 10)
    assert out["connection"] == []
    assert out["totals"]["packets_non_ip"] == 5
    assert out["totals"]["undecoded"] == [{"what": "link type 10 (FDDI)", "packets": 5}]
    assert err == f"nettrail: {tmp_path / 'cap.pcap'}: 5 packets not decoded: 5 link type 10 (FDDI)\n"


def test_unknown_ethertypes_and_encrypted_wifi_are_named(tmp_path: Path) -> None:
    ip = conversation()[0]
    frames = [
        bytes(Ether(**MACS, type=0x88E7) / Raw(b"\x00" * 18) / ip),  # PBB
        bytes(Ether(**MACS, type=0x8926) / Raw(b"\x00" * 6) / ip),  # VN-Tag
        bytes(Ether(**MACS) / Dot1Q(vlan=3, type=0x8926) / Raw(b"\x00" * 6) / ip),  # VN-Tag inside a VLAN
        bytes(Ether(**MACS) / MPLS(s=1) / Ether(**MACS) / ip),  # an Ethernet pseudowire
        bytes(Ether(**MACS) / ip),  # one IP packet: the rest is reported, not lost in it
    ]
    out, err = analyze(tmp_path, frames, 1)
    assert out["totals"]["undecoded"] == [
        {"what": "MPLS payload that is not IP (pseudowire)", "packets": 1},
        {"what": "ethertype 0x88e7 (PBB)", "packets": 1},
        {"what": "ethertype 0x8926 (VN-Tag)", "packets": 2},
    ]
    assert "4 packets not decoded: 2 ethertype 0x8926 (VN-Tag), 1 MPLS payload" in err
    wifi = [bytes(Dot11(type=2, FCfield=0x40, **WIFI) / Raw(b"\x00" * 60))]
    out, err = analyze(tmp_path, wifi, 105)
    assert out["totals"]["undecoded"] == [{"what": "802.11 protected (encrypted) data", "packets": 1}]
    assert err.endswith("1 packets not decoded: 1 802.11 protected (encrypted) data\n")


def test_arp_beside_ip_is_counted_but_not_warned_about(tmp_path: Path) -> None:
    frames = [bytes(Ether(**MACS) / ARP(psrc=A, pdst=B))] + [bytes(Ether(**MACS) / p) for p in conversation()]
    out, err = analyze(tmp_path, frames, 1)
    assert err == "" and len(out["connection"]) == 1
    assert out["totals"]["undecoded"] == [{"what": "ethertype 0x0806 (ARP)", "packets": 1}]
    out, err = analyze(tmp_path, frames[:1], 1)  # only ARP: say so
    assert err.endswith("1 packets not decoded: 1 ethertype 0x0806 (ARP)\n")
