"""ip-flows (the ip provider's always-on mode): one ip_flows map entry -> IpFlowCounters.

The kernel keeps exact packet and byte counts per (netns, interface, direction,
IP version, protocol, addresses, ports) in the LRU map ip_flows, with the counts of the
flows holding a per-CPU slot (map ip_slots) in front of it; the collector reads both
every --flow-interval, adds each slot to its entry, and reports the entries that moved. Keep in sync with:
kmod/nettrail.h (nt_ip_flow_key, nt_ip_flow), collector/bpf/layout.py and
collector/bpf/source.py (which computes the deltas and the eviction loss).
"""

from __future__ import annotations

from typing import Any

from translators.ip import PROTOCOL_NAMES
from translators.kernel import KernelEnv, KernelRecord, make
from translators.records import IpFlowCounters

AF_INET, AF_INET6 = 2, 10


def translate_ip_flow(
    key: dict[str, Any], counts: dict[str, int], delta: tuple[int, int], env: KernelEnv, ts_ns: int, sample_every: int
) -> KernelRecord:
    """key: nt_ip_flow_key fields (saddr/daddr as bytes); counts: nt_ip_flow; delta: (packets, bytes)."""
    family = AF_INET if key["version"] == 4 else AF_INET6
    proto = key["protocol"]
    return make(
        IpFlowCounters,
        dict(
            host_id=env.host_id,
            boot_id=env.boot_id,
            seq=0,
            ts_ns=ts_ns,
            ts_wall=env.wall(ts_ns),
            provider="ip",
            probe="flow-counters",
            hook="map/ip_flows",
            netns=key["netns"] or None,
            ip_ver=key["version"],
            src=env.address(family, key["saddr"]),
            sport=key["sport"] or None,
            dst=env.address(family, key["daddr"]),
            dport=key["dport"] or None,
            direction="send" if key["direction"] == 1 else "receive",
            if_index=key["if_index"],
            protocol=proto,
            protocol_name=PROTOCOL_NAMES.get(proto, str(proto)),
            packets=counts["packets"],
            bytes=counts["bytes"],
            packets_delta=delta[0],
            bytes_delta=delta[1],
            samples=counts["samples"],
            sampling=sample_every or None,
            start_ts_ns=counts["first_ns"],
            end_ts_ns=counts["last_ns"],
        ),
        env,
    )
