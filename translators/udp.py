"""udp provider: raw kernel events -> SockEvent for datagrams a socket's receive queue refused.

Per-datagram send/receive records are not implemented yet (issue 5); see
docs/collector.md. Keep in sync with: kmod/nettrail.h (nt_udp_fail_body).
"""

from __future__ import annotations

from translators.kernel import KernelEnv, KernelRecord, Raw, envelope, make
from translators.records import SockEvent

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
