"""IPv4 packets built byte by byte with their checksums, for kernel tests that inject
traffic themselves (tests/tun_lab.py writes them to a tun device; the tcpdebug test sends
a raw segment). Keep the header layouts in sync with RFC 791/768/793 (no options)."""

from __future__ import annotations

import socket
import struct

SYN, ACK, PSH = 0x02, 0x10, 0x08


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4(proto: int, src: str, dst: str, body: bytes) -> bytes:
    head = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 1, 0, 64, proto, 0, socket.inet_aton(src), socket.inet_aton(dst)
    )
    return head[:10] + struct.pack("!H", checksum(head)) + head[12:] + body


def pseudo_header(src: str, dst: str, proto: int, length: int) -> bytes:
    """The IPv4 pseudo-header TCP and UDP checksums cover (RFC 793, 768)."""
    return socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, proto, length)


def _with_l4_checksum(proto: int, src: str, dst: str, seg: bytes, at: int) -> bytes:
    csum = checksum(pseudo_header(src, dst, proto, len(seg)) + seg)
    return seg[:at] + struct.pack("!H", csum) + seg[at + 2 :]


def udp(src: str, sport: int, dst: str, dport: int, payload: bytes) -> bytes:
    seg = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    return ipv4(socket.IPPROTO_UDP, src, dst, _with_l4_checksum(socket.IPPROTO_UDP, src, dst, seg, 6))


def tcp(src: str, sport: int, dst: str, dport: int, seq: int, ack: int, flags: int, payload: bytes = b"") -> bytes:
    seg = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0) + payload
    return ipv4(socket.IPPROTO_TCP, src, dst, _with_l4_checksum(socket.IPPROTO_TCP, src, dst, seg, 16))
