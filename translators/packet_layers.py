"""Packet header vocabularies and the per-packet decoders for the rare packets.

The bulk decoder (translators/packet.py) reads the common headers of a whole batch
with numpy; the few packets it cannot handle that way come here one at a time: IPv6
extension-header chains, the flow quoted by an ICMP destination-unreachable error,
and TCP options other than the plain timestamp layout. Also the per-packet kind codes,
protocol and ICMP code names, and how addresses are kept as ints (IPv6 above V6_MARK).

Keep in sync with: translators/packet.py (the kind codes it writes, the packets it
hands over), translators/packet_records.py (the names it shows).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

# per-packet kind codes (column `kind`)
K_MALFORMED, K_OTHER, K_IP, K_TCP, K_UDP, K_ICMP = -1, 0, 1, 6, 17, 58
VLAN_TYPES = (0x8100, 0x88A8, 0x9100)
IPV6_EXT = (0, 43, 60, 135, 139, 140, 253, 254)  # hop-by-hop, routing, dest opts, mobility, HIP, shim6, tests
IPV6_FRAG, IPV6_AH, IPV6_NONE = 44, 51, 59
PROTO_NAMES = {
    1: "ICMP",
    2: "IGMP",
    6: "TCP",
    17: "UDP",
    41: "IPV6",
    47: "GRE",
    50: "ESP",
    51: "AH",
    58: "ICMPV6",
    132: "SCTP",
    136: "UDPLITE",
}
ICMP4_UNREACH = {
    0: "net-unreachable",
    1: "host-unreachable",
    2: "protocol-unreachable",
    3: "port-unreachable",
    4: "fragmentation-needed",
    9: "net-prohibited",
    10: "host-prohibited",
    13: "admin-prohibited",
}
ICMP6_UNREACH = {
    0: "no-route",
    1: "admin-prohibited",
    3: "address-unreachable",
    4: "port-unreachable",
    5: "policy-failed",
    6: "reject-route",
}
V6_MARK = 1 << 128  # keeps IPv6 address ints apart from IPv4 ones in flow keys


@dataclass
class TcpOptions:
    mss: int | None = None
    wscale: int | None = None
    sack_permitted: bool = False
    sack: list[tuple[int, int]] | None = None
    ts_val: int | None = None
    ts_ecr: int | None = None


@dataclass
class IcmpQuote:
    """The flow quoted by an ICMP destination-unreachable message."""

    error: str
    ip_ver: int
    proto: int
    src: int
    dst: int
    sport: int
    dport: int


def addr_str(value: int) -> str:
    if value >= V6_MARK:
        return str(ipaddress.IPv6Address(value - V6_MARK))
    return str(ipaddress.IPv4Address(value))


# --- per-packet helpers (rare packets) -------------------------------------------------


def parse_tcp_options(buf: bytes | bytearray, start: int, stop: int) -> TcpOptions:
    """TCP options between start and stop (already clipped to the captured bytes)."""
    opts = TcpOptions()
    i = start
    while i < stop:
        kind = buf[i]
        if kind == 0:
            break
        if kind == 1:
            i += 1
            continue
        if i + 1 >= stop:
            break
        length = buf[i + 1]
        if length < 2 or i + length > stop:
            break
        body = i + 2
        if kind == 2 and length == 4:
            opts.mss = (buf[body] << 8) | buf[body + 1]
        elif kind == 3 and length == 3:
            opts.wscale = buf[body]
        elif kind == 4 and length == 2:
            opts.sack_permitted = True
        elif kind == 5 and length >= 10 and (length - 2) % 8 == 0:
            blocks = []
            for j in range(body, i + length, 8):
                left, right = struct.unpack_from(">II", buf, j)
                blocks.append((left, right))
            opts.sack = blocks
        elif kind == 8 and length == 10:
            opts.ts_val, opts.ts_ecr = struct.unpack_from(">II", buf, body)
        i += length
    return opts


def walk_ipv6(buf: bytes | bytearray, l3: int, end_cap: int, tot: int) -> tuple[int, int, int] | str:
    """Follow the extension-header chain -> (upper protocol, header bytes, fragment code) or a reason."""
    nh = buf[l3 + 6]
    off = l3 + 40
    frag = 0
    for _ in range(16):  # a bounded chain: more than 16 headers is not a real packet
        if nh in IPV6_EXT or nh == IPV6_AH:
            if off + 2 > end_cap:
                return "IPv6 extension header cut short"
            size = (buf[off + 1] + 2) * 4 if nh == IPV6_AH else (buf[off + 1] + 1) * 8
            nh = buf[off]
            off += size
        elif nh == IPV6_FRAG:
            if off + 8 > end_cap:
                return "IPv6 fragment header cut short"
            fo = (buf[off + 2] << 8) | buf[off + 3]
            frag = 2 if fo & 0xFFF8 else (1 if fo & 1 else frag)
            nh = buf[off]
            off += 8
        else:
            break
        if off - l3 > tot:
            return "IPv6 extension headers run past the payload length"
    else:
        return "IPv6 extension header chain too long"
    return nh, off - l3, frag


def icmp_quote(buf: bytes | bytearray, l4: int, end_cap: int, ver: int) -> IcmpQuote | None:
    typ, code = buf[l4], buf[l4 + 1]
    if (ver == 4 and typ != 3) or (ver == 6 and typ != 1):
        return None
    names = ICMP4_UNREACH if ver == 4 else ICMP6_UNREACH
    error = names.get(code, f"unreachable-code-{code}")
    q = l4 + 8
    if ver == 4:
        if q + 20 > end_cap or buf[q] >> 4 != 4:
            return None
        ihl = (buf[q] & 15) * 4
        proto = buf[q + 9]
        src = int.from_bytes(buf[q + 12 : q + 16], "big")
        dst = int.from_bytes(buf[q + 16 : q + 20], "big")
        p = q + ihl
    else:
        if q + 40 > end_cap or buf[q] >> 4 != 6:
            return None
        proto = buf[q + 6]
        src = int.from_bytes(buf[q + 8 : q + 24], "big") | V6_MARK
        dst = int.from_bytes(buf[q + 24 : q + 40], "big") | V6_MARK
        p = q + 40
    if proto not in (6, 17) or p + 4 > end_cap:
        return None
    sport, dport = struct.unpack_from(">HH", buf, p)
    return IcmpQuote(error=error, ip_ver=ver, proto=proto, src=src, dst=dst, sport=sport, dport=dport)
