"""Packet translator: raw captured frames -> decoded header columns -> IpPacket/UdpDatagram/TcpSegment.

Decoding is done per batch with numpy (one pass of fancy indexing per header field over
all packets of the chunk); only the unusual packets go through per-packet Python code:
IPv6 extension-header chains, ICMP errors (to read the quoted flow), and TCP options
other than the plain timestamp layout Linux sends on every data segment.

Link types: Ethernet (1, with up to two 802.1Q/802.1ad tags), Linux SLL (113) and SLL2
(276), raw IP (101, 12, 14), IPv4 (228), IPv6 (229), BSD null/loopback (0, 108) here;
PPP, PPPoE, MPLS, 802.11, NFLOG and the tunnels (IP-in-IP, GRE, VXLAN) per packet in
translators/linklayers.py.

A packet is one of: ``tcp``/``udp``/``icmp``/``ip`` (other IP protocol or a non-first
fragment), ``other`` (not IP, unknown link type) or ``malformed`` (with a reason).
Lengths follow the IP header, not the captured length, so snaplen-cut captures keep
their sizes; a header that claims more than the frame carries, or is cut before its
fixed part, is malformed.

Keep in sync with: collector/sources/pcap.py (Batch) and translators/records.py
(IpPacket, UdpDatagram, TcpSegment fields).
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from collector.sources.pcap import Batch
from translators import linklayers
from translators.records import IpPacket, Record, TcpSegment, UdpDatagram, tcp_flags_str

IntArray = npt.NDArray[np.int64]

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


class Decoded:
    """One decoded batch: numpy columns per packet, Python lists on demand.

    The TCP fast path reads :meth:`tcp_columns` (lists for the TCP packets only); the
    ordered per-packet path (UDP, ICMP, --packets) reads the per-packet list properties.
    """

    LIST_COLUMNS = (
        "kind",
        "ip_ver",
        "sport",
        "dport",
        "seq",
        "ack",
        "flags",
        "window",
        "payload",
        "ip_len",
        "fragment",
    )

    def __init__(
        self, batch: Batch, arrays: dict[str, IntArray], v6: dict[int, tuple[int, int]], options: dict[int, TcpOptions],
        icmp: dict[int, IcmpQuote], reasons: dict[int, str],
    ) -> None:  # fmt: skip
        self.batch = batch
        self.n = len(batch)
        self.cols = arrays
        self.v6 = v6
        self.option_map = options
        self.icmp = icmp
        self.reasons = reasons
        self._lists: dict[str, list[Any]] = {}

    # columns the analysis reads without --packets, with the narrowest dtype that holds them
    PORTABLE = {
        "kind": np.int8, "ip_ver": np.int8, "src": np.int64, "dst": np.int64, "sport": np.int32, "dport": np.int32,
        "seq": np.uint32, "ack": np.uint32, "flags": np.int16, "window": np.int32, "payload": np.int32,
        "ip_len": np.int32, "fragment": np.int8, "proto": np.int16,
    }  # fmt: skip

    def portable(self) -> Decoded:
        """A compact copy for another process: no packet bytes, only what the analysis reads
        when it does not emit per-packet records (about 45 bytes per packet)."""
        b = self.batch
        empty = np.zeros(0, np.int64)
        lean = Batch(
            buf=b"", data_off=empty, caplen=b.caplen.astype(np.int32), wirelen=b.wirelen.astype(np.int32),
            ts_ns=b.ts_ns, linktype=empty, iface=empty, file_off=b.file_off, first_frame=b.first_frame,
        )  # fmt: skip
        cols = {name: self.cols[name].astype(dtype) for name, dtype in self.PORTABLE.items()}
        out = Decoded(lean, cols, self.v6, self.option_map, self.icmp, self.reasons)
        out.n = self.n
        return out

    def _list(self, name: str) -> list[Any]:
        got = self._lists.get(name)
        if got is None:
            got = self._lists[name] = self.cols[name].tolist()
        return got

    @property
    def frame(self) -> list[int]:
        got = self._lists.get("frame")
        if got is None:
            first = self.batch.first_frame
            got = self._lists["frame"] = list(range(first, first + self.n))
        return got

    @property
    def ts_ns(self) -> list[int]:
        got = self._lists.get("ts_ns")
        if got is None:
            got = self._lists["ts_ns"] = self.batch.ts_ns.tolist()
        return got

    @property
    def wire_len(self) -> list[int]:
        got = self._lists.get("wire_len")
        if got is None:
            got = self._lists["wire_len"] = self.batch.wirelen.tolist()
        return got

    def _addr(self, name: str, which: int) -> list[int]:
        got = self._lists.get(name)
        if got is None:
            got = self._lists[name] = self.cols[name].tolist()
            for i, pair in self.v6.items():
                got[i] = pair[which]
        return got

    @property
    def src(self) -> list[int]:
        return self._addr("src", 0)

    @property
    def dst(self) -> list[int]:
        return self._addr("dst", 1)

    @property
    def options(self) -> list[TcpOptions | None]:
        got = self._lists.get("options")
        if got is None:
            got = self._lists["options"] = [None] * self.n
            for i, opts in self.option_map.items():
                got[i] = opts
        return got

    kind = property(lambda self: self._list("kind"))
    ip_ver = property(lambda self: self._list("ip_ver"))
    sport = property(lambda self: self._list("sport"))
    dport = property(lambda self: self._list("dport"))
    seq = property(lambda self: self._list("seq"))
    ack = property(lambda self: self._list("ack"))
    flags = property(lambda self: self._list("flags"))
    window = property(lambda self: self._list("window"))
    payload = property(lambda self: self._list("payload"))
    ip_len = property(lambda self: self._list("ip_len"))
    fragment = property(lambda self: self._list("fragment"))

    def tcp_columns(self) -> tuple[list[Any], ...]:
        """Per-TCP-packet lists: frame, ts, ip_ver, src, sport, dst, dport, seq, ack, flags, window, payload, ip_len, options."""
        c = self.cols
        mask = c["kind"] == K_TCP
        idx = np.flatnonzero(mask)
        src = c["src"][idx].tolist()
        dst = c["dst"][idx].tolist()
        opts: list[TcpOptions | None] = [None] * len(idx)
        if self.v6 or self.option_map:
            pos = np.cumsum(mask) - 1
            for i, pair in self.v6.items():
                if mask[i]:
                    src[pos[i]], dst[pos[i]] = pair
            for i, o in self.option_map.items():
                opts[pos[i]] = o
        frames = (idx + self.batch.first_frame).tolist()
        cols = [
            c[name][idx].tolist()
            for name in ("ip_ver", "sport", "dport", "seq", "ack", "flags", "window", "payload", "ip_len")
        ]
        ver, sport, dport, seq, ack, flags, win, payload, ip_len = cols
        ts = self.batch.ts_ns[idx].tolist()
        return frames, ts, ver, src, sport, dst, dport, seq, ack, flags, win, payload, ip_len, opts


def addr_str(value: int) -> str:
    if value >= V6_MARK:
        return str(ipaddress.IPv6Address(value - V6_MARK))
    return str(ipaddress.IPv4Address(value))


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
    return l3, ver, linklayers.resolve(bt.buf, lt, off, cap, l3, ver, et)


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
        res = _walk_ipv6(bt.buf, int(l3[i]), int(end_cap[i]), int(tot[i]))
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
    payload = np.where(tcp, l4len - thl, np.where(udp, np.where(proto == 17, ulen - 8, l4len - 8), 0))
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
        q = _icmp_quote(buf, int(l4[i]), int(end_cap[i]), int(ver[i]))
        if q is not None:
            icmp_q[i] = q

    arrays = {
        "kind": kind, "ip_ver": ver, "src": src, "dst": dst, "sport": sport, "dport": dport, "seq": seq, "ack": ack,
        "flags": flags, "window": win, "payload": payload, "ip_len": tot, "fragment": frag,
        "l3": l3, "l4": l4, "hlen": hlen, "thl": thl, "proto": proto, "ulen": ulen, "frag_off": fo,
    }  # fmt: skip
    return Decoded(bt, arrays, v6, options, icmp_q, reasons)


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


def _walk_ipv6(buf: bytes | bytearray, l3: int, end_cap: int, tot: int) -> tuple[int, int, int] | str:
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


def _icmp_quote(buf: bytes | bytearray, l4: int, end_cap: int, ver: int) -> IcmpQuote | None:
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


# --- records (the --packets view and translator tests) ------------------------------------


def ip_record(d: Decoded, i: int, env: dict[str, Any]) -> IpPacket:
    """The ip:::receive-style record of packet i (IPv4 or IPv6 header fields)."""
    buf, c = d.batch.buf, d.cols
    l3 = int(c["l3"][i])
    ver = d.ip_ver[i]
    fields: dict[str, Any] = {}
    if ver == 4:
        tos = buf[l3 + 1]
        fo = int(c["frag_off"][i])
        fields = dict(
            ttl=buf[l3 + 8], tos=tos, dscp=tos >> 2, ecn=tos & 3, ident=(buf[l3 + 4] << 8) | buf[l3 + 5],
            frag_flags=fo >> 13, frag_offset=(fo & 0x1FFF) * 8, checksum=(buf[l3 + 10] << 8) | buf[l3 + 11],
        )  # fmt: skip
    else:
        word = struct.unpack_from(">I", buf, l3)[0]
        tclass = (word >> 20) & 0xFF
        fields = dict(ttl=buf[l3 + 7], tos=tclass, dscp=tclass >> 2, ecn=tclass & 3, flow_label=word & 0xFFFFF)
    proto = int(c["proto"][i])
    return IpPacket(
        **env,
        probe="receive",
        provider="ip",
        ip_ver=ver,
        src=addr_str(d.src[i]),
        dst=addr_str(d.dst[i]),
        protocol=proto,
        protocol_name=PROTO_NAMES.get(proto, str(proto)),
        header_length=int(c["hlen"][i]),
        length=d.ip_len[i],
        payload_length=d.ip_len[i] - int(c["hlen"][i]),
        is_fragment=d.fragment[i] > 0,
        frame=d.frame[i],
        wire_length=d.wire_len[i],
        **fields,
    )


def udp_record(d: Decoded, i: int, env: dict[str, Any]) -> UdpDatagram:
    buf = d.batch.buf
    l4 = int(d.cols["l4"][i])
    return UdpDatagram(
        **env,
        probe="receive",
        provider="udp" if int(d.cols["proto"][i]) == 17 else "udplite",
        ip_ver=d.ip_ver[i],
        src=addr_str(d.src[i]),
        sport=d.sport[i],
        dst=addr_str(d.dst[i]),
        dport=d.dport[i],
        length=(buf[l4 + 4] << 8) | buf[l4 + 5],
        payload_length=d.payload[i],
        checksum=(buf[l4 + 6] << 8) | buf[l4 + 7],
        frame=d.frame[i],
        wire_length=d.wire_len[i],
    )


def tcp_record(d: Decoded, i: int, env: dict[str, Any]) -> TcpSegment:
    """The header view of packet i; analysis fields are filled in by the caller."""
    buf = d.batch.buf
    l4 = int(d.cols["l4"][i])
    thl = int(d.cols["thl"][i])
    end_cap = int(d.batch.data_off[i] + d.batch.caplen[i])
    opts = d.option_map.get(i) or parse_tcp_options(buf, l4 + 20, min(l4 + thl, end_cap))
    flags = d.flags[i]
    return TcpSegment(
        **env,
        probe="receive",
        provider="tcp",
        ip_ver=d.ip_ver[i],
        src=addr_str(d.src[i]),
        sport=d.sport[i],
        dst=addr_str(d.dst[i]),
        dport=d.dport[i],
        tcp_seq=d.seq[i],
        tcp_ack=d.ack[i],
        tcp_flags=flags & 0xFF,
        tcp_flags_str=tcp_flags_str(flags & 0xFF),
        tcp_offset=thl,
        tcp_window=d.window[i],
        tcp_checksum=(buf[l4 + 16] << 8) | buf[l4 + 17],
        tcp_urgent=(buf[l4 + 18] << 8) | buf[l4 + 19],
        tcp_payload_len=d.payload[i],
        opt_mss=opts.mss,
        opt_wscale=opts.wscale,
        opt_sack_permitted=opts.sack_permitted or None,
        opt_sack_blocks=[list(b) for b in opts.sack] if opts.sack else None,
        opt_ts_val=opts.ts_val,
        opt_ts_ecr=opts.ts_ecr,
        frame=d.frame[i],
        wire_length=d.wire_len[i],
    )


def packet_records(d: Decoded, i: int, env: dict[str, Any]) -> list[Record]:
    """IP record plus the transport record of packet i (empty for non-IP or malformed packets)."""
    kind = d.kind[i]
    if kind in (K_MALFORMED, K_OTHER):
        return []
    out: list[Record] = [ip_record(d, i, env)]
    if kind == K_TCP:
        out.append(tcp_record(d, i, env))
    elif kind == K_UDP:
        out.append(udp_record(d, i, env))
    return out
