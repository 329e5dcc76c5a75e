"""udp provider: raw kernel events -> UdpDatagram, SockEvent (queue failures, failed calls) and FlowCounters.

Datagrams at the device (net_dev_queue send / netif_receive_skb receive, 4-tuple
source first) and send/recv calls (sock_send_length / sock_recv_length; before Linux
6.3 the UDP functions' or the system calls' exits: HOOKS), local first, with the bytes
moved; a call that failed is a SockEvent `send-error`/`receive-error`, so an ICMP error reaching the sender is never a `udp send`); exact per-direction counts
come from the `udp_flows` map.
Keep in sync with: kmod/nettrail.h (nt_udp_body, nt_udp_flow_key, nt_udp_fail_body).
"""

from __future__ import annotations

from typing import Any

from translators import ip6ext
from translators.kernel import AF_INET, AF_INET6, KernelEnv, KernelRecord, Raw, envelope, kernel_text, make
from translators.records import FlowCounters, SockEvent, UdpDatagram

SOCK_PROTOCOLS = {6: "tcp", 17: "udp", 136: "udplite"}


def translate_fail(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    proto = SOCK_PROTOCOLS.get(raw["sk_protocol"], str(raw["sk_protocol"]))
    return [
        make(
            SockEvent,
            dict(
                **envelope(raw, env, "udp" if proto != "udplite" else "udplite", "udp-fail-queue",
                           "tp_btf/udp_fail_queue_rcv_skb"),
                proto=proto,
                rc=raw["rc"],
                rmem_alloc=raw["rmem_alloc"],
                truesize=raw["truesize"],
                rcvbuf=raw["rcvbuf"],
            ),
            env,
        )
    ]  # fmt: skip


# (direction, call) -> hook: call 0 the device, 1 the socket tracepoints (6.3+); before 6.3
# 5 the UDP functions' exits (kmod/udp_functions.bpf.c; an IPv6 socket's are udpv6_*) or 2-4
# the system calls (kmod/udp_syscalls.bpf.c); NT_UDP_CALL_* in nettrail.h
HOOKS = {
    (0, 0): "tp_btf/netif_receive_skb",
    (1, 0): "tp_btf/net_dev_queue",
    (0, 1): "tp_btf/sock_recv_length",
    (1, 1): "tp_btf/sock_send_length",
    (0, 2): "tp_btf/sys_exit:recvfrom",
    (1, 2): "tp_btf/sys_exit:sendto",
    (0, 3): "tp_btf/sys_exit:recvmsg",
    (1, 3): "tp_btf/sys_exit:sendmsg",
    (0, 4): "tp_btf/sys_exit:recvmmsg",
    (1, 4): "tp_btf/sys_exit:sendmmsg",
    (0, 5): "fexit/udp_recvmsg",
    (1, 5): "fexit/udp_sendmsg",
}
CALL_FN = 5


def call_hook(raw: Raw) -> str:
    """Where a call record was seen (HOOKS), an IPv6 socket's function named as such."""
    hook = HOOKS[(raw["direction"], raw["call"])]
    return hook.replace("/udp_", "/udpv6_") if raw["call"] == CALL_FN and raw["family"] == AF_INET6 else hook


# the hooks of call records (local end first), as the UDP page tells them from the device's
CALL_HOOKS = tuple(
    sorted({call_hook({"direction": d, "call": c, "family": f}) for d, c in HOOKS if c for f in (AF_INET, AF_INET6)})
)


def ext_datagram(raw: Raw) -> tuple[int, dict[str, Any]] | None:
    """An IPv6 packet with extension headers: (protocol, its UDP fields) when the walked
    chain ends in UDP or UDP-Lite with the header copied, else None (not a datagram)."""
    chain = ip6ext.walk(raw["protocol"], raw["ext"])
    if chain.protocol not in (17, 136) or chain.ports is None or len(chain.l4) < 8:
        return None
    l4 = chain.l4
    sport, dport = chain.ports
    length = int.from_bytes(l4[4:6], "big")
    fields = {"sport": sport, "dport": dport, "length": length, "checksum": int.from_bytes(l4[6:8], "big")}
    return chain.protocol, fields


def translate_failed_call(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    """A send/recv call that moved nothing: not a datagram but the socket's error reaching its
    caller (ECONNREFUSED after an ICMP port unreachable, EAGAIN, ...): a SockEvent."""
    send, proto = raw["direction"], SOCK_PROTOCOLS.get(raw["protocol"], str(raw["protocol"]))
    kwargs = envelope(raw, env, "udp" if proto != "udplite" else "udplite", "send-error" if send else "receive-error",
                      call_hook(raw))  # fmt: skip
    kwargs.update(_remote_if_connected(kwargs), proto=proto, rc=raw["ret"], sk_err=-raw["ret"])
    return [make(SockEvent, kwargs, env)]


def _remote_if_connected(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call on an unconnected socket has no remote end: null, not 0.0.0.0 port 0."""
    if kwargs.get("dport") == 0 and kwargs.get("dst") in ("0.0.0.0", "::"):
        return {"dst": None, "dport": None}
    return {}


def translate_datagram(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    send, call = raw["direction"], raw["call"]
    if call and raw["ret"] < 0:
        return translate_failed_call(raw, env)
    ext: dict[str, Any] = {}
    if not call and raw["family"] == AF_INET6 and raw["protocol"] in ip6ext.EXT_HEADERS:
        found = ext_datagram(raw)
        if found is None:
            return []  # the chain did not end in a datagram (e.g. ICMPv6 behind hop-by-hop)
        raw = {**raw, "protocol": found[0], "length": found[1]["length"], "checksum": found[1]["checksum"]}
        ext = {"sport": found[1]["sport"], "dport": found[1]["dport"]}
    provider = "udplite" if raw["protocol"] == 136 else "udp"
    kwargs = envelope(raw, env, provider, "send" if send else "receive", call_hook(raw) if call else HOOKS[(send, 0)])
    kwargs.update(ext)
    if call:
        kwargs.update(_remote_if_connected(kwargs), bytes=raw["ret"])
    else:
        kwargs.update(
            length=raw["length"],
            payload_length=max(0, raw["length"] - 8),
            checksum=raw["checksum"],
            gso_segs=raw["gso_segs"] or 1,
            if_name=kernel_text(raw["if_name"]) or None,
        )
    return [make(UdpDatagram, kwargs, env)]


def translate_flow(key: Raw, counts: Raw, env: KernelEnv, ts_ns: int) -> KernelRecord:
    """Exact counts of one wire direction (src -> dst) from the udp_flows map."""
    family = key["family"]
    return make(
        FlowCounters,
        dict(
            host_id=env.host_id,
            boot_id=env.boot_id,
            seq=0,
            ts_ns=ts_ns,
            ts_wall=env.wall(ts_ns),
            provider="udplite" if key["protocol"] == 136 else "udp",
            probe="flow-counters",
            hook="map/udp_flows",
            netns=key["netns"] or None,
            ip_ver=4 if family == AF_INET else 6,
            src=env.address(family, key["saddr"]),
            sport=key["sport"],
            dst=env.address(family, key["daddr"]),
            dport=key["dport"],
            proto="udplite" if key["protocol"] == 136 else "udp",
            packets_out=counts["packets_out"],
            bytes_out=counts["bytes_out"],
            packets_in=counts["packets_in"],
            bytes_in=counts["bytes_in"],
        ),
        env,
    )
