"""ip provider: raw kernel events -> IpPacket (FreeBSD ip:::send / ip:::receive, providers.md 1-2).

send = net_dev_queue (before the qdisc, a GSO skb is one record standing for
gso_segs wire packets), receive = netif_receive_skb (before IP validation). Keep in
sync with: kmod/nettrail.h (nt_ip_body) and docs/collector.md.
"""

from __future__ import annotations

from translators.kernel import KernelEnv, KernelRecord, Raw, envelope, make
from translators.records import IpPacket

PROTOCOL_NAMES = {1: "ICMP", 2: "IGMP", 6: "TCP", 17: "UDP", 41: "IPV6", 44: "IPV6-FRAG", 47: "GRE", 50: "ESP",
                  51: "AH", 58: "ICMPV6", 132: "SCTP", 136: "UDPLITE"}  # fmt: skip
IFF_LOOPBACK = 0x8
IPV6_FRAGMENT = 44


def translate_packet(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    send = raw["direction"] == 1
    probe, hook = ("send", "tp_btf/net_dev_queue") if send else ("receive", "tp_btf/netif_receive_skb")
    v4 = raw["version"] == 4
    frag_off = raw["frag_off"]
    proto = raw["protocol"]
    segs = raw["gso_segs"]
    return [
        make(
            IpPacket,
            dict(
                **envelope(raw, env, "ip", probe, hook),
                if_name=raw["if_name"].decode(errors="replace") or None,
                if_index=raw["if_index"] or None,
                if_local=bool(raw["dev_flags"] & IFF_LOOPBACK),
                protocol=proto,
                protocol_name=PROTOCOL_NAMES.get(proto, str(proto)),
                header_length=raw["header_length"],
                length=raw["length"],
                payload_length=max(0, raw["length"] - raw["header_length"]),
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
            ),
            env,
        )
    ]
