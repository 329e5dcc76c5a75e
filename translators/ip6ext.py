"""IPv6 extension-header walk over the raw bytes the kernel copied after the fixed
header (kmod/nettrail.h NT_IP6_EXT_LEN): the kernel records identity and raw bytes,
user space interprets them (style.md). Used by translators/ip.py and translators/udp.py.
Keep the header numbers in sync with ip6_ext_header() in kmod/udp.bpf.h.
"""

from __future__ import annotations

from dataclasses import dataclass

HOP_BY_HOP, ROUTING, FRAGMENT, DEST_OPTS = 0, 43, 44, 60
EXT_HEADERS = frozenset({HOP_BY_HOP, ROUTING, FRAGMENT, DEST_OPTS})
FIXED_HEADER = 40
MAX_HEADERS = 8  # a bound for hostile chains; the copied bytes bound it anyway
PORTS_PROTOCOLS = frozenset({6, 17, 136})


@dataclass(frozen=True)
class Chain:
    protocol: int  # the upper-layer protocol, or the extension header the bytes ran out in
    header_length: int  # fixed header + every walked extension header
    complete: bool  # False: the chain ran past the copied bytes
    ports: tuple[int, int] | None  # the L4 source and destination ports, when they were copied
    l4: bytes  # the copied bytes of the upper-layer header onwards
    fragment_offset: int | None  # bytes, when a fragment header was walked
    more_fragments: bool | None


def walk(next_header: int, ext: bytes) -> Chain:
    """Follow next-header links from the fixed header through `ext` (bounded)."""
    off, proto = 0, next_header
    frag_offset: int | None = None
    more: bool | None = None
    for _ in range(MAX_HEADERS):
        if proto not in EXT_HEADERS:
            break
        if off + 8 > len(ext):
            return Chain(proto, FIXED_HEADER + off, False, None, b"", frag_offset, more)
        nxt = ext[off]
        if proto == FRAGMENT:
            word = int.from_bytes(ext[off + 2 : off + 4], "big")
            frag_offset, more = (word >> 3) * 8, bool(word & 1)
            size = 8
        else:
            size = (ext[off + 1] + 1) * 8
        off += size
        proto = nxt
        if frag_offset:  # a later fragment: no upper-layer header follows
            break
    else:
        if proto in EXT_HEADERS:
            return Chain(proto, FIXED_HEADER + off, False, None, b"", frag_offset, more)
    l4 = ext[off:]
    ports = None
    if proto in PORTS_PROTOCOLS and not frag_offset and len(l4) >= 4:
        ports = (int.from_bytes(l4[0:2], "big"), int.from_bytes(l4[2:4], "big"))
    return Chain(proto, FIXED_HEADER + off, off <= len(ext), ports, l4, frag_offset, more)
