"""Link layers and tunnels the vectorised decoder leaves alone: found per packet, in Python.

translators/packet.py decodes Ethernet (with two VLAN tags), Linux SLL/SLL2, raw IP and
BSD null/loopback for a whole batch at once. What is left is rarer and is read here,
one packet at a time, after that pass:

* packets it could not place (no IP version), by link type: PPP (9), PPP in HDLC framing
  (50), PPPoE (51), 802.11 data frames (105) with or without radiotap (127), NFLOG (239);
  by ethertype on Ethernet and Linux SLL/SLL2: PPPoE sessions (0x8864, also after VLAN or
  QinQ tags), MPLS label stacks (0x8847, 0x8848), a third VLAN tag, 802.3 frames with
  LLC/SNAP, and the data-centre tags: PBB (802.1ah I-TAG, 0x88E7), VN-Tag (0x8926) and
  Cisco FabricPath (0x8903), each skipped to the frame it carries, as Zeek's PBB, VNTag
  and Ethernet analyzers and Wireshark's ieee8021ah, vntag and cisco-fp-mim dissectors do.
  802.11 and 802.3 payloads need LLC/SNAP; protected 802.11 frames cannot be read.
* IP packets that carry another IP packet: IP-in-IP (4), IPv6-in-IP (41), GRE (47, IP or
  transparent Ethernet inside) and VXLAN (UDP port 4789). The inner packet replaces the
  outer one, so it is analysed as its own connection (up to MAX_NESTING tunnels deep);
  the tunnel itself is not a connection then.

A packet still not placed gets a label saying what it was (`link type 9 (PPP)`,
`ethertype 0x88cc`, `802.11 management/control`, ...), which the analysis counts and
reports, so an undecodable capture never comes back silently empty.

Plain Python, no numpy: translators/packet.py applies these to the packets of a batch its
columns left unplaced (``_resolve``), translators/packet_rows.py to every packet of a
small capture.
Keep in sync with: translators/packet.py (_link_layer, _resolve), translators/packet_rows.py,
docs/analyze.md (Input).
"""

from __future__ import annotations

MAX_NESTING = 3
VXLAN_PORT = 4789
VLAN_TYPES = (0x8100, 0x88A8, 0x9100)
ETHER_IP = {0x0800: 4, 0x86DD: 6}
PPP_IP = {0x0021: 4, 0x0057: 6}
LINK_NAMES = {
    9: "PPP", 50: "PPP in HDLC framing", 51: "PPPoE", 105: "802.11", 127: "802.11 radiotap", 239: "NFLOG",
    10: "FDDI", 6: "Token Ring", 1: "Ethernet", 113: "Linux SLL", 276: "Linux SLL2",
}  # fmt: skip
ETHER_NAMES = {0x0806: "ARP", 0x88CC: "LLDP", 0x8863: "PPPoE discovery", 0x88E5: "MACsec", 0x888E: "EAPOL"}
# Tags that carry a frame: ethertype -> (offset of the next ethertype, offset of its payload),
# both from the tag's first byte (the byte after its own ethertype).
# PBB: I-TAG (PCP/DEI/UCA, 24-bit I-SID), the customer's destination and source MACs.
# VN-Tag: 4 bytes of tag (direction, pointer, destination and source VIF).
# FabricPath: its ethertype sits where a classic frame's would, after the outer MACs; then
# FTag/TTL (2 bytes), and the whole classic frame: destination and source MACs, ethertype.
CARRIERS = {0x88E7: (16, 18), 0x8926: (4, 6), 0x8903: (14, 16)}
MAX_HEADERS = 8  # ethertype headers after the first two VLAN tags: PBB, its customer tags, VN-Tag, ...


class Unplaced(Exception):
    """Why a packet could not be placed; its message is the label counted."""


def _u16(buf: bytes | bytearray, o: int, end: int) -> int:
    if o + 2 > end:
        raise Unplaced("frame shorter than its link-layer header")
    return int.from_bytes(buf[o : o + 2], "big")


def _ip_at(buf: bytes | bytearray, o: int, end: int, want: int | None = None) -> tuple[int, int]:
    """(offset, version) of an IP header at o, by its version nibble."""
    if o >= end:
        raise Unplaced("frame shorter than its link-layer header")
    ver = buf[o] >> 4
    if ver not in (4, 6) or (want is not None and ver != want):
        raise Unplaced("no IP header where the link layer says")
    return o, ver


def ethertype_payload(buf: bytes | bytearray, o: int, et: int, end: int) -> tuple[int, int]:
    """The IP header after an ethertype whose payload starts at o."""
    for _ in range(MAX_HEADERS):
        if et in ETHER_IP:
            return _ip_at(buf, o, end, ETHER_IP[et])
        if et in VLAN_TYPES:  # a third (or later) tag: packet.py reads two
            et, o = _u16(buf, o + 2, end), o + 4
            continue
        if et in CARRIERS:
            at, o = o + CARRIERS[et][0], o + CARRIERS[et][1]
            et = _u16(buf, at, end)
            continue
        if et == 0x8864:  # PPPoE session: ver/type, code, session id, length, then a PPP protocol
            return ppp_payload(buf, o + 6, end)
        if et in (0x8847, 0x8848):
            return mpls_payload(buf, o, end)
        if et <= 1500:  # 802.3 length: LLC/SNAP names the ethertype
            et, o = snap(buf, o, end)
            continue
        name = ETHER_NAMES.get(et)
        raise Unplaced(f"ethertype 0x{et:04x}" + (f" ({name})" if name else ""))
    raise Unplaced("too many nested link-layer headers")


def snap(buf: bytes | bytearray, o: int, end: int) -> tuple[int, int]:
    """LLC/SNAP (AA AA 03, OUI, ethertype) -> (ethertype, payload offset)."""
    if o + 8 > end or bytes(buf[o : o + 3]) != b"\xaa\xaa\x03":
        raise Unplaced("802.2 LLC without SNAP")
    return int.from_bytes(buf[o + 6 : o + 8], "big"), o + 8


def ppp_payload(buf: bytes | bytearray, o: int, end: int) -> tuple[int, int]:
    """PPP: optional FF 03 address/control, a 1- or 2-byte protocol (RFC 1661 field compression)."""
    if o + 2 <= end and buf[o] == 0xFF and buf[o + 1] == 0x03:
        o += 2
    if o >= end:
        raise Unplaced("frame shorter than its link-layer header")
    if buf[o] & 1:  # compressed protocol field: one byte
        proto, o = buf[o], o + 1
    else:
        proto, o = _u16(buf, o, end), o + 2
    if proto not in PPP_IP:
        raise Unplaced(f"PPP protocol 0x{proto:04x}")
    return _ip_at(buf, o, end, PPP_IP[proto])


def mpls_payload(buf: bytes | bytearray, o: int, end: int) -> tuple[int, int]:
    """Skip the label stack to its bottom (S bit); the payload is IP by its version nibble."""
    for _ in range(16):
        if o + 4 > end:
            raise Unplaced("MPLS label stack cut short")
        bottom = buf[o + 2] & 1
        o += 4
        if bottom:
            try:
                return _ip_at(buf, o, end)
            except Unplaced:
                raise Unplaced("MPLS payload that is not IP (pseudowire)") from None
    raise Unplaced("MPLS label stack deeper than 16")


def wifi_payload(buf: bytes | bytearray, o: int, end: int) -> tuple[int, int]:
    """An 802.11 data frame: its header (addr4, QoS, HT control), then LLC/SNAP."""
    if o + 24 > end:
        raise Unplaced("802.11 header cut short")
    fc0, fc1 = buf[o], buf[o + 1]
    if (fc0 >> 2) & 3 != 2:
        raise Unplaced("802.11 management/control")
    if fc1 & 0x40:
        raise Unplaced("802.11 protected (encrypted) data")
    subtype = fc0 >> 4
    if subtype & 4:
        raise Unplaced("802.11 null data")
    hlen = 24 + (6 if fc1 & 3 == 3 else 0)
    if subtype & 8:  # QoS data: a QoS control field, then HT control if the order bit is set
        hlen += 2 + (4 if fc1 & 0x80 else 0)
    et, p = snap(buf, o + hlen, end)
    return ethertype_payload(buf, p, et, end)


def nflog_payload(buf: bytes | bytearray, o: int, end: int) -> tuple[int, int]:
    """NFLOG: family, version, resource id, then TLVs (little-endian length and type, padded
    to 4 bytes); type 9 (NFULA_PAYLOAD) holds the IP packet."""
    if o + 4 > end:
        raise Unplaced("NFLOG header cut short")
    family = buf[o]
    p = o + 4
    while p + 4 <= end:
        length = int.from_bytes(buf[p : p + 2], "little")
        tlv_type = int.from_bytes(buf[p + 2 : p + 4], "little") & 0x7FFF
        if length < 4:
            break
        if tlv_type == 9:
            return _ip_at(buf, p + 4, end, {2: 4, 10: 6}.get(family))
        p += (length + 3) & ~3
    raise Unplaced("NFLOG without a payload")


def place(buf: bytes | bytearray, linktype: int, off: int, end: int, l3: int, et: int) -> tuple[int, int]:
    """(IP offset, version) of a packet packet.py left without one; raises Unplaced."""
    if linktype in (1, 113, 276):
        if et < 0:
            raise Unplaced("frame shorter than its link-layer header")
        return ethertype_payload(buf, l3, et, end)
    if linktype in (9, 50):
        return ppp_payload(buf, off, end)
    if linktype == 51:
        return ppp_payload(buf, off + 6, end)
    if linktype == 105:
        return wifi_payload(buf, off, end)
    if linktype == 127:
        if off + 4 > end:
            raise Unplaced("radiotap header cut short")
        return wifi_payload(buf, off + int.from_bytes(buf[off + 2 : off + 4], "little"), end)
    if linktype == 239:
        return nflog_payload(buf, off, end)
    name = LINK_NAMES.get(linktype)
    raise Unplaced(f"link type {linktype}" + (f" ({name})" if name else ""))


def inner_packet(buf: bytes | bytearray, l3: int, ver: int, end: int) -> tuple[int, int] | None:
    """The IP packet a tunnel packet carries, or None when it is not a tunnel."""
    if ver == 4:
        if l3 + 20 > end or int.from_bytes(buf[l3 + 6 : l3 + 8], "big") & 0x3FFF:
            return None  # fragments are not reassembled
        hlen, proto = (buf[l3] & 15) * 4, buf[l3 + 9]
    else:
        if l3 + 40 > end:
            return None
        hlen, proto = 40, buf[l3 + 6]
    p = l3 + hlen
    try:
        if proto == 4:
            return _ip_at(buf, p, end, 4)
        if proto == 41:
            return _ip_at(buf, p, end, 6)
        if proto == 47:  # GRE: checksum, key and sequence words follow the first one when flagged
            flags, ptype = _u16(buf, p, end), _u16(buf, p + 2, end)
            q = p + 4 + 4 * bin(flags & 0xB000).count("1")
            if ptype == 0x6558:  # transparent Ethernet bridging
                return ethertype_payload(buf, q + 14, _u16(buf, q + 12, end), end)
            return ethertype_payload(buf, q, ptype, end)
        if proto == 17 and _u16(buf, p + 2, end) == VXLAN_PORT:
            q = p + 8 + 8  # UDP header, VXLAN header, then an Ethernet frame
            return ethertype_payload(buf, q + 14, _u16(buf, q + 12, end), end)
    except Unplaced:
        return None  # a tunnel of something else: the outer packet stays what it is
    return None
