"""ip provider: raw kernel events -> IpPacket (FreeBSD ip:::send / ip:::receive, providers.md 1-2).

send = net_dev_queue (before the qdisc, a GSO skb is one record standing for
gso_segs wire packets), receive = netif_receive_skb (before IP validation). Keep in
sync with: kmod/nettrail.h (nt_ip_body) and docs/collector.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from translators import ip6ext, kernel
from translators.kernel import (
    KernelEnv,
    KernelRecord,
    Raw,
    envelope,
    envelope_columns,
    make,
    row_by_row,
    rows_in_wire_order,
)
from translators.records import IpPacket

PROTOCOL_NAMES = {1: "ICMP", 2: "IGMP", 6: "TCP", 17: "UDP", 41: "IPV6", 44: "IPV6-FRAG", 47: "GRE", 50: "ESP",
                  51: "AH", 58: "ICMPV6", 132: "SCTP", 136: "UDPLITE"}  # fmt: skip
IFF_LOOPBACK = 0x8
IPV6_FRAGMENT = 44


def ext_fields(raw: Raw) -> dict[str, Any]:
    """An IPv6 packet with extension headers: its chain walked from the copied bytes
    (upper-layer protocol, ports, header length, fragment), as IpPacket fields."""
    chain = ip6ext.walk(raw["protocol"], raw["ext"])
    out: dict[str, Any] = {
        "protocol": chain.protocol,
        "protocol_name": PROTOCOL_NAMES.get(chain.protocol, str(chain.protocol)),
        "header_length": chain.header_length,
        "payload_length": max(0, raw["length"] - chain.header_length),
    }
    if chain.ports is not None:
        out["sport"], out["dport"] = chain.ports
    if chain.fragment_offset is not None:
        out.update(is_fragment=True, frag_offset=chain.fragment_offset, frag_flags=int(bool(chain.more_fragments)))
    if chain.fragment_offset:  # a later fragment has no transport header, hence no ports
        out.update(sport=None, dport=None)
    if not chain.complete:
        out["approx"] = ["protocol", "header_length", "payload_length"]
    return out


def ip_length(version: int, length: int, skb_len: int) -> int:
    """The packet's real length: the header's, unless it cannot say it. IPv4's 16-bit total
    length is 0 above 64 KiB (BIG TCP, a 65,536-byte loopback skb); the kernel's IPv6 length
    (payload length + 40) wraps at 2^16 and a jumbo payload length is 0. Then the bytes from
    the network header to the skb's end (skb_len), which is what a GSO/GRO skb carries."""
    if version == 4:
        return length or skb_len
    payload = (length - 40) & 0xFFFF
    return payload + 40 if payload else skb_len


def has_ext(raw: Raw) -> bool:
    return raw["version"] == 6 and raw["protocol"] in ip6ext.EXT_HEADERS


def translate_packet(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    send = raw["direction"] == 1
    probe, hook = ("send", "tp_btf/net_dev_queue") if send else ("receive", "tp_btf/netif_receive_skb")
    v4 = raw["version"] == 4
    frag_off = raw["frag_off"]
    proto = raw["protocol"]
    segs = raw["gso_segs"]
    length = ip_length(raw["version"], raw["length"], raw["skb_len"])
    kwargs = dict(
        **envelope(raw, env, "ip", probe, hook),
        if_name=kernel.kernel_text(raw["if_name"]) or None,
        if_index=raw["if_index"] or None,
        if_local=bool(raw["dev_flags"] & IFF_LOOPBACK),
        protocol=proto,
        protocol_name=PROTOCOL_NAMES.get(proto, str(proto)),
        header_length=raw["header_length"],
        length=length,
        payload_length=max(0, length - raw["header_length"]),
        ttl=raw["ttl"],
        tos=raw["tos"],
        dscp=raw["tos"] >> 2,
        ecn=raw["tos"] & 3,
        ident=raw["ident"] if v4 else None,
        frag_flags=frag_off >> 13 if v4 else None,
        frag_offset=(frag_off & 0x1FFF) * 8 if v4 else None,
        is_fragment=bool(frag_off & 0x2000 or frag_off & 0x1FFF) if v4 else proto == IPV6_FRAGMENT,
        flow_label=None if v4 else raw["flow_label"],
        checksum=raw["checksum"] if v4 else None,
        gso_segs=segs or 1,
        gso_size=raw["gso_size"] or None,
        approx=["length", "payload_length"] if segs > 1 else [],
    )
    if v4 and frag_off & 0x1FFF:  # a later fragment has no transport header, hence no ports
        kwargs.update(sport=None, dport=None)
    if not v4 and has_ext(raw):
        kwargs.update(ext_fields({**raw, "length": length}))
    return [make(IpPacket, kwargs, env)]


def translate_packet_batch(a: npt.NDArray[np.void], env: KernelEnv) -> list[KernelRecord]:
    """translate_packet over a batch, column by column (byte-identical; tested)."""
    ext = (a["version"] == 6) & np.isin(a["protocol"], list(ip6ext.EXT_HEADERS))
    if kernel.VALIDATE or not env.wire or ext.any():  # extension headers are rare: row by row
        return row_by_row(a, env, translate_packet)
    send = a["direction"] == 1
    v4 = a["version"] == 4
    frag = a["frag_off"].astype(np.int64)
    raw_length = a["length"].astype(np.int64)
    payload6 = (raw_length - 40) & 0xFFFF
    length = np.where(
        v4,
        np.where(raw_length != 0, raw_length, a["skb_len"]),
        np.where(payload6 != 0, payload6 + 40, a["skb_len"]),
    ).astype(np.int64)
    hlen = a["header_length"].astype(np.int64)
    tos = a["tos"]
    segs = a["gso_segs"]
    proto = a["protocol"].tolist()
    v4l = v4.tolist()

    def v4_only(values: Any) -> list[Any]:
        return [v if is4 else None for v, is4 in zip(values.tolist(), v4l, strict=True)]

    columns = envelope_columns(
        a,
        env,
        "ip",
        ["send" if s else "receive" for s in send.tolist()],
        ["tp_btf/net_dev_queue" if s else "tp_btf/netif_receive_skb" for s in send.tolist()],
    )
    columns.update(
        {
            "approx": [["length", "payload_length"] if s > 1 else [] for s in segs.tolist()],
            "if_name": [kernel.kernel_text(n) or None for n in a["if_name"].tolist()],
            "if_index": [i or None for i in a["if_index"].tolist()],
            "if_local": ((a["dev_flags"] & IFF_LOOPBACK) != 0).tolist(),
            "protocol": proto,
            "protocol_name": [PROTOCOL_NAMES.get(p, str(p)) for p in proto],
            "header_length": hlen.tolist(),
            "length": length.tolist(),
            "payload_length": np.maximum(0, length - hlen).tolist(),
            "ttl": a["ttl"].tolist(),
            "tos": tos.tolist(),
            "dscp": (tos >> 2).tolist(),
            "ecn": (tos & 3).tolist(),
            "ident": v4_only(a["ident"]),
            "frag_flags": v4_only(frag >> 13),
            # a later IPv4 fragment has no transport header, hence no ports
            "sport": [
                None if is4 and f & 0x1FFF else p
                for p, f, is4 in zip(columns["sport"], frag.tolist(), v4l, strict=True)
            ],
            "dport": [
                None if is4 and f & 0x1FFF else p
                for p, f, is4 in zip(columns["dport"], frag.tolist(), v4l, strict=True)
            ],
            "frag_offset": v4_only((frag & 0x1FFF) * 8),
            "is_fragment": [
                bool(f & 0x2000 or f & 0x1FFF) if is4 else p == IPV6_FRAGMENT
                for f, is4, p in zip(frag.tolist(), v4l, proto, strict=True)
            ],
            "flow_label": [None if is4 else f for f, is4 in zip(a["flow_label"].tolist(), v4l, strict=True)],
            "checksum": v4_only(a["checksum"]),
            "gso_segs": [s or 1 for s in segs.tolist()],
            "gso_size": [s or None for s in a["gso_size"].tolist()],
        }
    )
    return rows_in_wire_order(IpPacket, columns, len(a))
