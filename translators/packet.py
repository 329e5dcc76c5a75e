"""Packet translator: raw captured frames -> decoded header columns -> IpPacket/UdpDatagram/TcpSegment.

Decoding is done per batch with numpy (one pass of fancy indexing per header field over
all packets of the chunk); only the unusual packets go through per-packet Python code:
IPv6 extension-header chains, ICMP errors (to read the quoted flow), and TCP options
other than the plain timestamp layout Linux sends on every data segment.

Link types: Ethernet (1, with up to two 802.1Q/802.1ad tags), Linux SLL (113) and SLL2
(276), raw IP (101, 12, 14), IPv4 (228), IPv6 (229), BSD null/loopback (0, 108) here;
PPP, PPPoE, MPLS, 802.11, NFLOG, the data-centre tags (PBB, VN-Tag, FabricPath) and the
tunnels (IP-in-IP, GRE, VXLAN) per packet in translators/linklayers.py.

A packet is one of: ``tcp``/``udp``/``icmp``/``ip`` (other IP protocol or a non-first
fragment), ``other`` (not IP, unknown link type) or ``malformed`` (with a reason).
Lengths follow the IP header, not the captured length, so snaplen-cut captures keep
their sizes; a header that claims more than the frame carries, or is cut before its
fixed part, is malformed.

The decoder is four modules: this one (link layers, then the IP and TCP/UDP headers of a
whole batch at once), packet_layers (vocabularies and the rare packets decoded one at a
time), packet_decoded (the resulting columns) and packet_records (records from them).
Callers import from here. translators/packet_rows.py applies the same rules packet by
packet in plain Python for small captures (no numpy import); a change to a check here
must be made there too (tests/test_packet_rows.py compares the two).

Keep in sync with: translators/packet_batch.py (Batch), translators/packet_rows.py (the same
rules per packet) and translators/records_packets.py (IpPacket, UdpDatagram, TcpSegment fields).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from translators import linklayers
from translators.packet_batch import Batch
from translators.packet_decoded import Decoded
from translators.packet_layers import (
    IPV6_NONE,
    K_ICMP,
    K_IP,
    K_MALFORMED,
    K_OTHER,
    K_TCP,
    K_UDP,
    V6_MARK,
    VLAN_TYPES,
    IcmpQuote,
    TcpOptions,
    addr_str,
    icmp_quote,
    parse_tcp_options,
    walk_ipv6,
)
from translators.packet_records import packet_records, tcp_record

IntArray = npt.NDArray[np.int64]

__all__ = [
    "K_ICMP",
    "K_IP",
    "K_MALFORMED",
    "K_OTHER",
    "K_TCP",
    "K_UDP",
    "Decoded",
    "IcmpQuote",
    "TcpOptions",
    "addr_str",
    "decode_batch",
    "packet_records",
    "parse_tcp_options",
    "tcp_record",
]


# --- bulk helpers -------------------------------------------------------------------


class _View:
    """Bounds-safe gathers over one batch buffer."""

    def __init__(self, buf: bytes | bytearray) -> None:
        self.u8 = np.frombuffer(buf, np.uint8)
        self.last = max(len(self.u8) - 1, 0)

    def b(self, idx: IntArray) -> IntArray:
        if not len(self.u8):
            return np.zeros(len(idx), np.int64)
        return self.u8.take(idx, mode="clip").astype(np.int64)

    def be16(self, idx: IntArray) -> IntArray:
        return (self.b(idx) << 8) | self.b(idx + 1)

    def block(self, start: IntArray, width: int) -> npt.NDArray[np.uint8]:
        """Rows of `width` (<= PAD) bytes from each start offset: one row gather from a sliding-window view.

        Batch buffers end with PAD zero bytes, so a header at the very end still reads whole;
        a start past them (garbage lengths) is clamped, and the length checks reject it."""
        if len(self.u8) < width:
            return np.zeros((len(start), width), np.uint8)
        windows = np.lib.stride_tricks.sliding_window_view(self.u8, width)
        return windows[np.clip(start, 0, len(self.u8) - width)]


def _u16(blk: npt.NDArray[np.uint8], o: int) -> IntArray:
    return (blk[:, o].astype(np.int64) << 8) | blk[:, o + 1]


def _u32(blk: npt.NDArray[np.uint8], o: int) -> IntArray:
    return (_u16(blk, o) << 16) | _u16(blk, o + 2)


def _link_layer(v: _View, bt: Batch) -> tuple[IntArray, IntArray, dict[int, str]]:
    """-> (l3 offset, IP version 4/6 or 0) per packet, and what each packet left at 0 was;
    the rarer link layers and tunnels are translators/linklayers.py's."""
    off, cap, lt = bt.data_off, bt.caplen, bt.linktype
    n = len(off)
    l3 = off.copy()
    ver = np.zeros(n, np.int64)
    eth = lt == 1
    sll = lt == 113
    sll2 = lt == 276
    et = np.full(n, -1, np.int64)
    m = eth & (cap >= 14)
    et[m] = v.be16(off[m] + 12)
    l3[eth] = off[eth] + 14
    m = sll & (cap >= 16)
    et[m] = v.be16(off[m] + 14)
    l3[sll] = off[sll] + 16
    m = sll2 & (cap >= 20)
    et[m] = v.be16(off[m])
    l3[sll2] = off[sll2] + 20
    for _ in range(2):  # 802.1Q / QinQ tags
        tag = np.isin(et, VLAN_TYPES) & (l3 + 4 <= off + cap)
        et[tag] = v.be16(l3[tag] + 2)
        l3[tag] += 4
    ver[et == 0x0800] = 4
    ver[et == 0x86DD] = 6
    raw = np.isin(lt, (101, 12, 14, 228, 229))
    null = np.isin(lt, (0, 108))
    l3[null] = off[null] + 4
    nib = np.isin(lt, (101, 12, 14, 228, 229, 0, 108)) & (l3 < off + cap)
    nibble = np.where(nib, v.b(l3) >> 4, 0)
    pick = (raw | null) & np.isin(nibble, (4, 6))
    ver[pick] = nibble[pick]
    ver[(lt == 228) & (nibble != 4)] = 0
    ver[(lt == 229) & (nibble != 6)] = 0
    return l3, ver, _resolve(bt.buf, lt, off, cap, l3, ver, et)


def _resolve(
    buf: bytes | bytearray, linktype: IntArray, off: IntArray, cap: IntArray, l3: IntArray, ver: IntArray, et: IntArray
) -> dict[int, str]:
    """Places the packets packet.py could not and unwraps tunnels, in place (l3, ver);
    -> packet index -> label of each packet still not placed."""
    u8 = np.frombuffer(buf, np.uint8)
    labels: dict[int, str] = {}
    for i in np.flatnonzero(ver == 0).tolist():
        end = int(off[i] + cap[i])
        try:
            l3[i], ver[i] = linklayers.place(buf, int(linktype[i]), int(off[i]), end, int(l3[i]), int(et[i]))
        except linklayers.Unplaced as why:
            labels[i] = str(why)
    # Tunnel candidates, found for the whole batch: an IPv4/IPv6 next protocol of 4, 41 or
    # 47, or UDP to port 4789 (no IPv6 extension headers are walked for this).
    if not len(u8):
        return labels
    for _ in range(linklayers.MAX_NESTING):
        proto = np.where(ver == 4, u8.take(l3 + 9, mode="clip"), np.where(ver == 6, u8.take(l3 + 6, mode="clip"), 0))
        hlen = np.where(ver == 4, (u8.take(l3, mode="clip") & 15).astype(np.int64) * 4, 40)
        dport = (u8.take(l3 + hlen + 2, mode="clip").astype(np.int64) << 8) | u8.take(l3 + hlen + 3, mode="clip")
        cand = np.isin(proto, (4, 41, 47)) | ((proto == 17) & (dport == linklayers.VXLAN_PORT))
        found = False
        for i in np.flatnonzero(cand & (ver > 0)).tolist():
            got = linklayers.inner_packet(buf, int(l3[i]), int(ver[i]), int(off[i] + cap[i]))
            if got is not None:
                l3[i], ver[i] = got
                found = True
        if not found:
            break
    return labels


def decode_batch(bt: Batch, want_options: bool = False) -> Decoded:
    """Decode every packet of a batch; see the module docstring."""
    v = _View(bt.buf)
    off, cap = bt.data_off, bt.caplen
    end_cap = off + cap
    l3, ver, unplaced = _link_layer(v, bt)
    kind = np.where(ver > 0, K_IP, K_OTHER).astype(np.int64)
    reasons: dict[int, str] = unplaced  # malformed packets' reasons; for K_OTHER ones, what they were
    wire3 = bt.wirelen - (l3 - off)

    def bad(mask: npt.NDArray[np.bool_], why: str) -> None:
        hit = np.flatnonzero(mask & (kind != K_MALFORMED))
        kind[hit] = K_MALFORMED
        for i in hit[:50].tolist():
            reasons.setdefault(i, why)
        for i in hit[50:].tolist():
            reasons[i] = why

    # Link layers too short to hold their own header.
    bad((l3 > end_cap) & (ver > 0), "frame shorter than its link-layer header")
    p4 = (ver == 4) & (kind == K_IP)
    bad(p4 & (l3 + 20 > end_cap), "IPv4 header cut short")
    p4 &= kind == K_IP
    h4 = v.block(l3, 20)
    vihl = h4[:, 0].astype(np.int64)
    ihl = (vihl & 15) * 4
    bad(p4 & ((vihl >> 4) != 4), "IPv4 version field is not 4")
    bad(p4 & (ihl < 20), "IPv4 header length below 20")
    bad(p4 & (l3 + ihl > end_cap), "IPv4 options cut short")
    p4 &= kind == K_IP
    t4 = _u16(h4, 2)
    t4 = np.where(t4 == 0, wire3, t4)  # TSO captures carry 0
    bad(p4 & (t4 < ihl), "IPv4 total length below its header length")
    bad(p4 & (t4 > wire3), "IPv4 total length runs past the end of the frame")
    p4 &= kind == K_IP
    fo = _u16(h4, 6)
    hlen = np.where(p4, ihl, 0)
    tot = np.where(p4, t4, 0)
    proto = np.where(p4, h4[:, 9], 0)
    frag = np.where(p4 & ((fo & 0x3FFF) != 0), np.where((fo & 0x1FFF) != 0, 2, 1), 0)  # 1 fragment, 2 non-first
    src = np.where(p4, _u32(h4, 12), 0)
    dst = np.where(p4, _u32(h4, 16), 0)
    del h4

    p6 = (ver == 6) & (kind == K_IP)
    bad(p6 & (l3 + 40 > end_cap), "IPv6 header cut short")
    p6 &= kind == K_IP
    bad(p6 & ((v.b(l3) >> 4) != 6), "IPv6 version field is not 6")
    p6 &= kind == K_IP
    pl = v.be16(l3 + 4)
    pl = np.where(pl == 0, wire3 - 40, pl)
    bad(p6 & (pl + 40 > wire3), "IPv6 payload length runs past the end of the frame")
    p6 &= kind == K_IP
    hlen[p6] = 40
    tot[p6] = pl[p6] + 40
    proto[p6] = v.b(l3 + 6)[p6]
    ext = p6 & ~np.isin(proto, (6, 17, 58, 1, IPV6_NONE, 50))
    for i in np.flatnonzero(ext).tolist():
        res = walk_ipv6(bt.buf, int(l3[i]), int(end_cap[i]), int(tot[i]))
        if isinstance(res, str):
            kind[i] = K_MALFORMED
            reasons[i] = res
        else:
            proto[i], hlen[i], frag[i] = res

    l4 = l3 + hlen
    l4len = tot - hlen
    ipok = kind == K_IP
    whole = ipok & (frag == 0)
    tcp = whole & (proto == 6)
    udp = whole & np.isin(proto, (17, 136))
    icmp = whole & ((proto == 1) & (ver == 4) | (proto == 58) & (ver == 6))

    bad(tcp & (l4 + 20 > end_cap), "TCP header cut short")
    tcp &= kind == K_IP
    h = v.block(l4, 24)  # the fixed TCP header plus the first option word (UDP/ICMP use the start)
    thl = (h[:, 12] >> 4).astype(np.int64) * 4
    bad(tcp & (thl < 20), "TCP header length below 20")
    bad(tcp & (thl > l4len), "TCP header length past the end of the IP payload")
    tcp &= kind == K_IP
    bad(udp & (l4 + 8 > end_cap), "UDP header cut short")
    udp &= kind == K_IP
    ulen = _u16(h, 4)
    bad(udp & (proto == 17) & ((ulen < 8) | (ulen > l4len)), "UDP length field is impossible")
    udp &= kind == K_IP
    bad(icmp & (l4 + 8 > end_cap), "ICMP header cut short")
    icmp &= kind == K_IP

    kind[tcp] = K_TCP
    kind[udp] = K_UDP
    kind[icmp] = K_ICMP
    # Values of rows that are not TCP (or UDP) are meaningless; every reader selects by kind.
    sport = _u16(h, 0)
    dport = _u16(h, 2)
    seq = _u32(h, 4)
    ack = _u32(h, 8)
    flags = h[:, 13].astype(np.int64) | ((h[:, 12].astype(np.int64) & 1) << 8)
    win = _u16(h, 14)
    # ICMP: the message after its 8-byte header (Zeek's ICMP byte count)
    icmp_body = np.where(icmp, np.maximum(l4len - 8, 0), 0)
    payload = np.where(tcp, l4len - thl, np.where(udp, np.where(proto == 17, ulen - 8, l4len - 8), icmp_body))
    first_option = _u32(h, 20)
    del h

    # TCP options: Linux data segments carry NOP NOP TS (12 bytes); everything else is parsed in Python.
    ts_only = tcp & (thl == 32) & (first_option == 0x0101080A)
    opt_idx = np.flatnonzero(tcp & (thl > 20) & (~ts_only if not want_options else True))
    options: dict[int, TcpOptions] = {}
    buf = bt.buf
    for i in opt_idx.tolist():
        start = int(l4[i]) + 20
        stop = min(int(l4[i]) + int(thl[i]), int(end_cap[i]))
        options[i] = parse_tcp_options(buf, start, stop)

    v6: dict[int, tuple[int, int]] = {}
    for i in np.flatnonzero((ver == 6) & (kind != K_MALFORMED)).tolist():
        o = int(l3[i])
        v6[i] = (
            int.from_bytes(buf[o + 8 : o + 24], "big") | V6_MARK,
            int.from_bytes(buf[o + 24 : o + 40], "big") | V6_MARK,
        )

    icmp_q: dict[int, IcmpQuote] = {}
    for i in np.flatnonzero(icmp).tolist():
        q = icmp_quote(buf, int(l4[i]), int(end_cap[i]), int(ver[i]))
        if q is not None:
            icmp_q[i] = q

    arrays = {
        "kind": kind, "ip_ver": ver, "src": src, "dst": dst, "sport": sport, "dport": dport, "seq": seq, "ack": ack,
        "flags": flags, "window": win, "payload": payload, "ip_len": tot, "fragment": frag,
        "l3": l3, "l4": l4, "hlen": hlen, "thl": thl, "proto": proto, "ulen": ulen, "frag_off": fo,
    }  # fmt: skip
    return Decoded(bt, arrays, v6, options, icmp_q, reasons)
