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
import zlib
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
    Dot1AH,
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


def ethertype(p: Any) -> int:
    return 0x86DD if p.haslayer(IPv6) else 0x0800


def vntag(p: Any, vlan_after: bool = False) -> bytes:
    """VN-Tag (scapy has no layer): 4 bytes of tag (d=1, destination VIF 21, source VIF 7),
    then the next ethertype; here a VLAN tag or IP."""
    inner = bytes(Dot1Q(vlan=5) / p) if vlan_after else bytes(p)
    return struct.pack(">IH", 0x8015_0007, 0x8100 if vlan_after else ethertype(p)) + inner


def fabricpath(p: Any, vlan: bool = False) -> bytes:
    """Cisco FabricPath (scapy has no layer): outer MACs (switch ids), 0x8903, FTag 1 and TTL 32,
    then the classic Ethernet frame whole, with its FCS (as Wireshark's cfp dissector expects)."""
    outer = bytes(Ether(dst="02:0a:00:01:00:00", src="02:0b:00:02:00:00", type=0x8903))
    classic = bytes(Ether(**MACS) / Dot1Q(vlan=9) / p if vlan else Ether(**MACS) / p)
    return outer + struct.pack(">H", (1 << 6) | 32) + classic + struct.pack("<I", zlib.crc32(classic))


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
    "pbb": (1, lambda p: bytes(Ether(**MACS) / Dot1AD(vlan=100) / Dot1AH(isid=0x123456) / Ether(**MACS) / p)),
    "pbb-customer-vlan": (1, lambda p: bytes(Ether(**MACS) / Dot1AH(isid=7) / Ether(**MACS) / Dot1AD(vlan=1) / Dot1Q(vlan=2) / p)),
    "vntag": (1, lambda p: bytes(Ether(**MACS, type=0x8926)) + vntag(p)),
    "vntag-then-vlan": (1, lambda p: bytes(Ether(**MACS, type=0x8926)) + vntag(p, vlan_after=True)),
    "vlan-then-vntag": (1, lambda p: bytes(Ether(**MACS) / Dot1Q(vlan=3, type=0x8926)) + vntag(p)),
    "fabricpath": (1, fabricpath),
    "fabricpath-vlan": (1, lambda p: fabricpath(p, vlan=True)),
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


@pytest.mark.parametrize(
    "name",
    ["vlan", "pppoe-qinq", "mpls", "gre", "vxlan", "radiotap", "sll2", "nflog", "pbb", "vntag-then-vlan", "fabricpath"],
)
def test_ipv6_inside_them_too(tmp_path: Path, name: str) -> None:
    linktype, wrap = WRAPS[name]
    six = {  # the same layers with the IPv6 codes (the data-centre tags' wraps take them from the packet)
        "vlan": lambda p: bytes(Ether(**MACS) / Dot1Q(vlan=5) / p),
        "pppoe-qinq": lambda p: bytes(Ether(**MACS) / Dot1AD() / Dot1Q() / PPPoE() / PPP(proto=0x57) / p),
        "mpls": lambda p: bytes(Ether(**MACS) / MPLS(label=100, s=1) / p),
        "gre": lambda p: bytes(outer_ip(47) / GRE(proto=0x86DD) / p),
        "vxlan": lambda p: bytes(WRAPS["vxlan"][1](p)),
        "radiotap": lambda p: bytes(RadioTap() / Dot11(type=2, **WIFI) / LLC() / SNAP(code=0x86DD) / p),
        "sll2": lambda p: bytes(CookedLinuxV2(proto=0x86DD) / p),
        "nflog": lambda p: b"\x0a" + nflog(p)[1:],
    }.get(name, wrap)
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


TAGS = ["pbb", "pbb-customer-vlan", "vntag", "vntag-then-vlan", "vlan-then-vntag", "fabricpath", "fabricpath-vlan"]


@pytest.mark.parametrize("name", TAGS)
def test_the_data_centre_tags_give_the_connection_plain_ethernet_gives(tmp_path: Path, name: str) -> None:
    linktype, wrap = WRAPS[name]
    tagged, err = analyze(tmp_path, [wrap(p) for p in conversation()], linktype)
    assert err == ""
    plain, _ = analyze(tmp_path, [WRAPS["ethernet"][1](p) for p in conversation()], 1)
    [conn] = tagged["connection"]
    # IP bytes: 40 + 40 + 140 from the originator, 40 + 40 back, whatever wraps the packets
    assert (conn["wire_bytes_orig"], conn["wire_bytes_resp"], conn["bytes_resp"]) == (220, 80, 0)
    envelope = ("host_id", "boot_id", "conn_uuid", "seq")  # the file's hash differs, nothing else may
    assert {k: v for k, v in conn.items() if k not in envelope} == {
        k: v for k, v in plain["connection"][0].items() if k not in envelope
    }
    assert tagged["totals"]["bytes_wire"] - plain["totals"]["bytes_wire"] == {
        "pbb": 4 * 5 + 18 * 5, "pbb-customer-vlan": (18 + 8) * 5, "vntag": 6 * 5, "vntag-then-vlan": 10 * 5,
        "vlan-then-vntag": 10 * 5, "fabricpath": (16 + 4) * 5, "fabricpath-vlan": (16 + 4 + 4) * 5,
    }[name]  # fmt: skip


def test_a_frame_cut_inside_a_data_centre_tag_is_counted_and_reported(tmp_path: Path) -> None:
    frames = [WRAPS[name][1](conversation()[0]) for name in ("pbb", "vntag", "fabricpath")]
    frames = [frames[0][: 14 + 4 + 14], frames[1][: 14 + 3], frames[2][: 16 + 13]]  # each ends before its ethertype
    out, err = analyze(tmp_path, frames, 1)
    assert out["connection"] == []
    assert out["totals"]["undecoded"] == [{"what": "frame shorter than its link-layer header", "packets": 3}]
    assert err.endswith("3 packets not decoded: 3 frame shorter than its link-layer header\n")


def test_unknown_ethertypes_and_encrypted_wifi_are_named(tmp_path: Path) -> None:
    ip = conversation()[0]
    frames = [
        bytes(Ether(**MACS, type=0x88E5) / Raw(b"\x00" * 16) / ip),  # MACsec: encrypted
        bytes(Ether(**MACS, type=0x88B5) / Raw(b"\x00" * 6) / ip),  # IEEE local experimental
        bytes(Ether(**MACS) / Dot1Q(vlan=3, type=0x88B5) / Raw(b"\x00" * 6) / ip),  # the same inside a VLAN
        bytes(Ether(**MACS) / MPLS(s=1) / Ether(**MACS) / ip),  # an Ethernet pseudowire
        bytes(Ether(**MACS) / ip),  # one IP packet: the rest is reported, not lost in it
    ]
    out, err = analyze(tmp_path, frames, 1)
    assert out["totals"]["undecoded"] == [
        {"what": "MPLS payload that is not IP (pseudowire)", "packets": 1},
        {"what": "ethertype 0x88b5", "packets": 2},
        {"what": "ethertype 0x88e5 (MACsec)", "packets": 1},
    ]
    assert "4 packets not decoded: 2 ethertype 0x88b5, 1 MPLS payload" in err
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
