"""Packet decoder for small captures: packet by packet in plain Python, without numpy.

``nettrail analyze`` of a capture of a few packets spent more time importing numpy
(OpenBLAS initialisation included) than analysing (issue 17 item 7). Below a size
(analysis/capture/decoding.py) the reader hands :class:`translators.packet_batch.Rows`
here instead of numpy batches, and :func:`decode_rows` makes the same decoded values
that translators/packet.py's ``decode_batch`` makes, one packet at a time, with the
same checks in the same order (so the same packets are malformed for the same first
reason), the same link layers and tunnels (translators/linklayers.py, shared) and the
same rare-packet helpers (translators/packet_layers.py, shared). The result,
:class:`RowsDecoded`, satisfies translators/packet_view.py's PacketView, which is all
the analysis and the packet records read. tests/test_packet_rows.py runs both decoders
over the test captures and mutations of them and compares kinds, reasons and records
field by field.

Reads need no bounds checks beyond the decoder's own length checks: every offset read
was checked against the frame's captured end first, and a batch buffer ends with PAD
zero bytes, which covers the fixed-size reads numpy's decoder makes past a short frame
(the first TCP option word, the tunnel candidate's UDP port).

Keep in sync with: translators/packet.py (decode_batch, _link_layer, _resolve: the same
rules), translators/packet_view.py, translators/packet_batch.py (Rows).
"""

from __future__ import annotations

from typing import Any

from translators import linklayers
from translators.packet_batch import Rows
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
    icmp_quote,
    parse_tcp_options,
    walk_ipv6,
)

RAW_IP = (101, 12, 14, 228, 229)
NULL_LOOPBACK = (0, 108)
COLUMNS = (
    "kind", "ip_ver", "src", "dst", "sport", "dport", "seq", "ack", "flags", "window", "payload", "ip_len", "fragment",
    "l3", "l4", "hlen", "thl", "proto", "ulen", "frag_off",
)  # fmt: skip
NO_EXT = (6, 17, 58, 1, IPV6_NONE, 50)  # IPv6 next headers that end the header chain at once


class RowsDecoded:
    """One decoded small batch: a Python list per column (translators/packet_view.py)."""

    def __init__(
        self, batch: Rows, cols: dict[str, list[int]], v6: dict[int, tuple[int, int]], options: dict[int, TcpOptions],
        icmp: dict[int, IcmpQuote], reasons: dict[int, str],
    ) -> None:  # fmt: skip
        self.batch = batch
        self.n = len(batch)
        self.cols = cols
        self.v6 = v6
        self.option_map = options
        self.icmp = icmp
        self.reasons = reasons

    @property
    def buf(self) -> bytes | bytearray:
        return self.batch.buf

    @property
    def first_frame(self) -> int:
        return self.batch.first_frame

    def value(self, name: str, i: int) -> int:
        return self.cols[name][i]

    def ts_at(self, i: int) -> int:
        return self.batch.ts_ns[i]

    def frame_end(self, i: int) -> int:
        return self.batch.data_off[i] + self.batch.caplen[i]

    def file_offset(self, i: int) -> int:
        return self.batch.file_off[i]

    def caplen_total(self) -> int:
        return sum(self.batch.caplen)

    def wirelen_total(self) -> int:
        return sum(self.batch.wirelen)

    def count_kind(self, kind: int) -> int:
        return self.cols["kind"].count(kind)

    def count_fragments(self) -> int:
        return sum(1 for f in self.cols["fragment"] if f > 0)

    def not_kind(self, kind: int) -> list[int]:
        return [i for i, k in enumerate(self.cols["kind"]) if k != kind]

    def _addr(self, name: str, which: int) -> list[int]:
        out = list(self.cols[name])
        for i, pair in self.v6.items():
            out[i] = pair[which]
        return out

    @property
    def src(self) -> list[int]:
        return self._addr("src", 0)

    @property
    def dst(self) -> list[int]:
        return self._addr("dst", 1)

    @property
    def frame(self) -> list[int]:
        return list(range(self.batch.first_frame, self.batch.first_frame + self.n))

    @property
    def ts_ns(self) -> list[int]:
        return self.batch.ts_ns

    @property
    def wire_len(self) -> list[int]:
        return self.batch.wirelen

    kind = property(lambda self: self.cols["kind"])
    ip_ver = property(lambda self: self.cols["ip_ver"])
    sport = property(lambda self: self.cols["sport"])
    dport = property(lambda self: self.cols["dport"])
    seq = property(lambda self: self.cols["seq"])
    ack = property(lambda self: self.cols["ack"])
    flags = property(lambda self: self.cols["flags"])
    window = property(lambda self: self.cols["window"])
    payload = property(lambda self: self.cols["payload"])
    ip_len = property(lambda self: self.cols["ip_len"])
    fragment = property(lambda self: self.cols["fragment"])

    def tcp_columns(self) -> tuple[list[Any], ...]:
        """Per-TCP-packet lists, as translators/packet_decoded.py's Decoded.tcp_columns."""
        c = self.cols
        idx = [i for i, k in enumerate(c["kind"]) if k == K_TCP]
        src, dst = self.src, self.dst
        first = self.batch.first_frame
        ts = self.batch.ts_ns
        opts = self.option_map
        return (
            [i + first for i in idx], [ts[i] for i in idx], [c["ip_ver"][i] for i in idx], [src[i] for i in idx],
            [c["sport"][i] for i in idx], [dst[i] for i in idx], [c["dport"][i] for i in idx],
            [c["seq"][i] for i in idx], [c["ack"][i] for i in idx], [c["flags"][i] for i in idx],
            [c["window"][i] for i in idx], [c["payload"][i] for i in idx], [c["ip_len"][i] for i in idx],
            [opts.get(i) for i in idx],
        )  # fmt: skip


def _link_layer(buf: bytes | bytearray, lt: int, off: int, end: int) -> tuple[int, int, str | None]:
    """-> (l3 offset, IP version or 0, label of an unplaced packet): packet.py's _link_layer
    and _resolve for one packet."""
    cap = end - off
    l3, ver, et = off, 0, -1
    if lt == 1:
        if cap >= 14:
            et = (buf[off + 12] << 8) | buf[off + 13]
        l3 = off + 14
    elif lt == 113:
        if cap >= 16:
            et = (buf[off + 14] << 8) | buf[off + 15]
        l3 = off + 16
    elif lt == 276:
        if cap >= 20:
            et = (buf[off] << 8) | buf[off + 1]
        l3 = off + 20
    for _ in range(2):  # 802.1Q / QinQ tags
        if et in VLAN_TYPES and l3 + 4 <= end:
            et = (buf[l3 + 2] << 8) | buf[l3 + 3]
            l3 += 4
    if et == 0x0800:
        ver = 4
    elif et == 0x86DD:
        ver = 6
    raw, null = lt in RAW_IP, lt in NULL_LOOPBACK
    if null:
        l3 = off + 4
    nibble = buf[l3] >> 4 if (raw or null) and l3 < end else 0
    if (raw or null) and nibble in (4, 6):
        ver = nibble
    if (lt == 228 and nibble != 4) or (lt == 229 and nibble != 6):
        ver = 0
    if ver == 0:
        try:
            l3, ver = linklayers.place(buf, lt, off, end, l3, et)
        except linklayers.Unplaced as why:
            return l3, 0, str(why)
    for _ in range(linklayers.MAX_NESTING):  # tunnels: the inner packet replaces the outer one
        if ver == 4:
            proto, hlen = buf[l3 + 9], (buf[l3] & 15) * 4
        else:
            proto, hlen = buf[l3 + 6], 40
        if not (proto in (4, 41, 47) or proto == 17 and (buf[l3 + hlen + 2] << 8 | buf[l3 + hlen + 3]) == 4789):
            break
        got = linklayers.inner_packet(buf, l3, ver, end)
        if got is None:
            break
        l3, ver = got
    return l3, ver, None


def decode_rows(rb: Rows, want_options: bool = False) -> RowsDecoded:
    """Decode every packet of a small batch; the same values as translators.packet.decode_batch."""
    buf = rb.buf
    cols: dict[str, list[int]] = {name: [] for name in COLUMNS}
    put = [cols[name].append for name in COLUMNS]
    v6: dict[int, tuple[int, int]] = {}
    options: dict[int, TcpOptions] = {}
    icmp_q: dict[int, IcmpQuote] = {}
    reasons: dict[int, str] = {}
    for i in range(len(rb)):
        off = rb.data_off[i]
        end = off + rb.caplen[i]
        l3, ver, label = _link_layer(buf, rb.linktype[i], off, end)
        kind = K_IP if ver > 0 else K_OTHER
        if label is not None:
            reasons[i] = label
        why = None
        hlen = tot = proto = frag = src = dst = fo = 0
        wire3 = rb.wirelen[i] - (l3 - off)
        if ver > 0 and l3 > end:
            why = "frame shorter than its link-layer header"
        elif ver == 4:
            if l3 + 20 > end:
                why = "IPv4 header cut short"
            else:
                vihl = buf[l3]
                ihl = (vihl & 15) * 4
                t4 = (buf[l3 + 2] << 8) | buf[l3 + 3] or wire3  # TSO captures carry 0
                if vihl >> 4 != 4:
                    why = "IPv4 version field is not 4"
                elif ihl < 20:
                    why = "IPv4 header length below 20"
                elif l3 + ihl > end:
                    why = "IPv4 options cut short"
                elif t4 < ihl:
                    why = "IPv4 total length below its header length"
                elif t4 > wire3:
                    why = "IPv4 total length runs past the end of the frame"
                else:
                    fo = (buf[l3 + 6] << 8) | buf[l3 + 7]
                    hlen, tot, proto = ihl, t4, buf[l3 + 9]
                    frag = (2 if fo & 0x1FFF else 1) if fo & 0x3FFF else 0  # 1 fragment, 2 non-first
                    src = int.from_bytes(buf[l3 + 12 : l3 + 16], "big")
                    dst = int.from_bytes(buf[l3 + 16 : l3 + 20], "big")
        elif ver == 6:
            if l3 + 40 > end:
                why = "IPv6 header cut short"
            elif buf[l3] >> 4 != 6:
                why = "IPv6 version field is not 6"
            else:
                pl = (buf[l3 + 4] << 8) | buf[l3 + 5] or wire3 - 40
                if pl + 40 > wire3:
                    why = "IPv6 payload length runs past the end of the frame"
                else:
                    hlen, tot, proto = 40, pl + 40, buf[l3 + 6]
                    if proto not in NO_EXT:
                        res = walk_ipv6(buf, l3, end, tot)
                        if isinstance(res, str):
                            kind = K_MALFORMED
                            reasons[i] = res
                        else:
                            proto, hlen, frag = res
        if why is not None:
            kind = K_MALFORMED
            reasons[i] = why
        l4, l4len = l3 + hlen, tot - hlen
        thl = ulen = sport = dport = seq = ack = flags = win = payload = 0
        if kind == K_IP and frag == 0:
            if proto == 6:
                if l4 + 20 > end:
                    why = "TCP header cut short"
                else:
                    thl = (buf[l4 + 12] >> 4) * 4
                    if thl < 20:
                        why = "TCP header length below 20"
                    elif thl > l4len:
                        why = "TCP header length past the end of the IP payload"
                    else:
                        kind = K_TCP
            elif proto in (17, 136):
                if l4 + 8 > end:
                    why = "UDP header cut short"
                else:
                    ulen = (buf[l4 + 4] << 8) | buf[l4 + 5]
                    if proto == 17 and (ulen < 8 or ulen > l4len):
                        why = "UDP length field is impossible"
                    else:
                        kind = K_UDP
            elif (proto == 1 and ver == 4) or (proto == 58 and ver == 6):
                if l4 + 8 > end:
                    why = "ICMP header cut short"
                else:
                    kind = K_ICMP
            if why is not None:
                kind = K_MALFORMED
                reasons[i] = why
        if kind in (K_TCP, K_UDP):
            sport, dport = (buf[l4] << 8) | buf[l4 + 1], (buf[l4 + 2] << 8) | buf[l4 + 3]
            if kind == K_TCP:
                seq = int.from_bytes(buf[l4 + 4 : l4 + 8], "big")
                ack = int.from_bytes(buf[l4 + 8 : l4 + 12], "big")
                flags = buf[l4 + 13] | ((buf[l4 + 12] & 1) << 8)
                win = (buf[l4 + 14] << 8) | buf[l4 + 15]
                payload = l4len - thl
                # Linux data segments carry NOP NOP TS, read by the analysis without parsing (as packet.py)
                ts_only = thl == 32 and buf[l4 + 20 : l4 + 24] == b"\x01\x01\x08\x0a"
                if thl > 20 and (want_options or not ts_only):
                    options[i] = parse_tcp_options(buf, l4 + 20, min(l4 + thl, end))
            else:
                payload = ulen - 8 if proto == 17 else l4len - 8
        elif kind == K_ICMP:
            sport = (buf[l4] << 8) | buf[l4 + 1]  # type and code, as packet.py's sport column reads them
            payload = max(l4len - 8, 0)  # the message after its 8-byte header, as packet.py
            q = icmp_quote(buf, l4, end, ver)
            if q is not None:
                icmp_q[i] = q
        if ver == 6 and kind != K_MALFORMED:
            v6[i] = (
                int.from_bytes(buf[l3 + 8 : l3 + 24], "big") | V6_MARK,
                int.from_bytes(buf[l3 + 24 : l3 + 40], "big") | V6_MARK,
            )
        for append, value in zip(put, (
            kind, ver, src, dst, sport, dport, seq, ack, flags, win, payload, tot, frag, l3, l4, hlen, thl, proto, ulen, fo,
        ), strict=True):  # fmt: skip
            append(value)
    return RowsDecoded(rb, cols, v6, options, icmp_q, reasons)
