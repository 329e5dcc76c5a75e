"""Recorded ip_flow_counters and stack_counter records for the counters page's tests
(tests/test_dashboard_counters_api.py, tests/browser/test_dashboard_counters.py), as a
collector running the ip-flows provider with stack counters would send them. Flow A is
evicted and recreated once (a new start_ts_ns, reported from zero), so its totals are the
sum of its deltas, not its last report's cumulative counts.
web1's stack counters come from two network namespaces (its init one and "blue"), so the
page shows each and their sum. Keep in sync with: translators/records.py (IpFlowCounters,
StackCounter), the expected totals below.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec

from translators.records import IpFlowCounters, Record, StackCounter

BOOT = "boot-counters"
T0 = 1_700_000_000.0
NETNS = 4026531840
# expected per-flow totals: name -> (host, direction, protocol name, src, dst, packets, bytes)
FLOWS = {
    "a": ("web1", "send", "TCP", ("10.1.0.1", 443), ("10.1.0.2", 50000), 28, 41_000),
    "b": ("web1", "receive", "UDP", ("10.1.0.2", 5353), ("10.1.0.1", 5353), 100, 9_000),
    "c": ("db1", "send", "ICMP", ("10.2.0.1", None), ("10.2.0.9", None), 1, 84),
}
PROTO = {"TCP": 6, "UDP": 17, "ICMP": 1}
BLUE = 4026532100  # web1's second namespace, named "blue" (ip netns add), read through pid 700
# who the collector read each namespace through: its /run/netns name, or a process in it
READ_IN = {
    NETNS: {"pid": 1, "tgid": 1, "comm": "systemd"},
    BLUE: {"netns_name": "blue", "pid": 700, "tgid": 700, "comm": "sleep"},
}
# expected stack counters: (host, netns, mib, counter) -> (latest value, increase, reports)
STACK = {
    ("web1", NETNS, "TcpExt", "ListenOverflows"): (12, 12, 2),
    ("web1", NETNS, "Tcp", "OutRsts"): (100, 3, 1),
    ("web1", BLUE, "TcpExt", "ListenDrops"): (9, 9, 1),
    ("web1", BLUE, "TcpExt", "ListenOverflows"): (9, 9, 1),
    ("db1", NETNS, "TcpExt", "TCPTimeouts"): (4, 4, 1),
}
# every namespace of a host summed: (host, mib, counter) -> (increase, namespaces, reports)
SUMMED = {
    ("web1", "TcpExt", "ListenOverflows"): (21, 2, 3),
    ("web1", "Tcp", "OutRsts"): (3, 1, 1),
    ("web1", "TcpExt", "ListenDrops"): (9, 1, 1),
    ("db1", "TcpExt", "TCPTimeouts"): (4, 1, 1),
}


def _envelope(
    host: str, seq: int, dt: float, provider: str, probe: str, hook: str, netns: int = NETNS
) -> dict[str, Any]:
    return {
        "host_id": host, "boot_id": BOOT, "seq": seq, "ts_ns": int((T0 + dt) * 1e9), "ts_wall": T0 + dt,
        "provider": provider, "probe": probe, "hook": hook, "netns": netns,
    }  # fmt: skip


def _flow(name: str, seq: int, dt: float, start: int, cumulative: tuple[int, int], delta: tuple[int, int]) -> Record:
    host, direction, proto, (src, sport), (dst, dport), _p, _b = FLOWS[name]
    return IpFlowCounters(
        **_envelope(host, seq, dt, "ip", "flow-counters", "map/ip_flows"),
        ip_ver=4, src=src, sport=sport, dst=dst, dport=dport, direction=direction, if_index=2,
        protocol=PROTO[proto], protocol_name=proto, packets=cumulative[0], bytes=cumulative[1],
        packets_delta=delta[0], bytes_delta=delta[1], start_ts_ns=start, end_ts_ns=start + 1000,
    )  # fmt: skip


def _stack(
    host: str, seq: int, dt: float, mib: str, counter: str, value: int, delta: int, netns: int = NETNS
) -> Record:
    hook = f"/proc/net/{'snmp' if mib == 'Tcp' else 'netstat'}"
    env = {**_envelope(host, seq, dt, "linux", "stack-counter", hook, netns), **READ_IN[netns]}
    return StackCounter(**env, mib=mib, counter=counter, value=value, delta=delta)


def records(host: str | None = None) -> list[Record]:
    """Every host's records; with `host`, only web1's, renamed to it (an ingest token's host)."""
    seq = itertools.count(1)
    out = [
        _flow("a", next(seq), 0, 10, (10, 15_000), (10, 15_000)),
        _flow("a", next(seq), 5, 10, (25, 37_000), (15, 22_000)),
        _flow("a", next(seq), 10, 99, (3, 4_000), (3, 4_000)),  # evicted and recreated
        _flow("b", next(seq), 10, 20, (100, 9_000), (100, 9_000)),
        _flow("c", next(seq), 12, 30, (1, 84), (1, 84)),
        _stack("web1", next(seq), 0, "TcpExt", "ListenOverflows", 5, 5),
        _stack("web1", next(seq), 10, "Tcp", "OutRsts", 100, 3),
        _stack("web1", next(seq), 30, "TcpExt", "ListenOverflows", 12, 7),
        _stack("web1", next(seq), 20, "TcpExt", "ListenDrops", 9, 9, BLUE),  # one read: drops, then overflows
        _stack("web1", next(seq), 20, "TcpExt", "ListenOverflows", 9, 9, BLUE),
        _stack("db1", next(seq), 20, "TcpExt", "TCPTimeouts", 4, 4),
    ]
    if host is None:
        return out
    return [msgspec.structs.replace(r, host_id=host) for r in out if r.host_id == "web1"]


def later_report_of_b(host: str, packets: int, nbytes: int) -> Record:
    """A further report of flow b on `host` (seq after records()'), adding packets and bytes."""
    _h, _d, _p, _s, _t, p0, b0 = FLOWS["b"]
    return msgspec.structs.replace(
        _flow("b", 100, 40, 20, (p0 + packets, b0 + nbytes), (packets, nbytes)), host_id=host
    )
