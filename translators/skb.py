"""skb provider: raw kernel events -> SkbDrop (FreeBSD m-free for a dropped buffer) and DropCount.

Drop reasons are named from the running kernel's BTF (`enum skb_drop_reason`), the
location symbolised through /proc/kallsyms (KernelEnv.symbolize). Keep in sync with:
kmod/nettrail.h (nt_skb_drop_body, nt_drop_key) and docs/collector.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from translators import kernel
from translators.kernel import (
    KernelEnv,
    KernelRecord,
    Raw,
    envelope,
    envelope_columns,
    make,
    row_by_row,
    rows_in_wire_order,
    without_flow,
)
from translators.records import DropCount, SkbDrop, SkbEvent

# enum nt_skb_stage (kmod/nettrail.h), in value order: (stage name, hook). Values 9 and
# 10 are the inferred copy and consume (the kernel frees a read buffer, or copies a
# linear datagram, without a tracepoint): stamped at the recvmsg's sock_recv_length.
# 11-13: a received buffer first seen at a receive entry hook (whichever fired first).
STAGE_TABLE = (
    ("rx-first", "tp_btf/netif_receive_skb"),
    ("tx-first", "tp_btf/net_dev_queue"),
    ("rx", "tp_btf/netif_receive_skb"),
    ("xmit-start", "tp_btf/net_dev_start_xmit"),
    ("xmit", "tp_btf/net_dev_xmit"),
    ("copy", "tp_btf/skb_copy_datagram_iovec"),
    ("consume", "tp_btf/consume_skb"),
    ("last-seen", "map/skbs"),
    ("queue", "tp_btf/net_dev_queue"),
    ("copy", "tp_btf/sock_recv_length"),
    ("consume", "tp_btf/sock_recv_length"),
    ("rx-first", "tp_btf/napi_gro_receive_entry"),
    ("rx-first", "tp_btf/netif_rx_entry"),
    ("rx-first", "tp_btf/netif_receive_skb_entry"),
)
STAGES = tuple(name for name, _ in STAGE_TABLE)
HOOKS = tuple(hook for _, hook in STAGE_TABLE)
INFERRED = frozenset({9, 10})
# an inferred stage's time is its recvmsg's return, an upper bound of the real one
INFERRED_APPROX = ["ts_ns", "since_prev_ns", "since_first_ns"]
ENDS = {1: "consumed", 2: "dropped", 3: "last_seen"}
L4_NAMES = {1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6", 132: "sctp", 136: "udplite"}
ETH_P_IP, ETH_P_IPV6 = 0x0800, 0x86DD


def drop_reason_name(env: KernelEnv, reason: int) -> str:
    return env.drop_reasons.get(reason, str(reason))


def translate_drop(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    """One dropped buffer; the 4-tuple is the packet's, source first."""
    l4 = raw["l4_proto"]
    kwargs: dict[str, Any] = envelope(raw, env, "skb", "m-free", "tp_btf/kfree_skb")
    return [
        make(
            SkbDrop,
            dict(
                **kwargs,
                len=raw["len"],
                linear_len=raw["len"] - raw["data_len"],
                data_off=raw["data_off"],
                truesize=raw["truesize"],
                nr_frags=raw["nr_frags"],
                pkt_type=raw["pkt_type"],
                cloned=bool(raw["cloned"]),
                protocol=raw["protocol"],
                l4_proto=L4_NAMES.get(l4, str(l4)) if l4 else None,
                if_index=raw["if_index"] or None,
                if_name=kernel.kernel_text(raw["if_name"]) or None,
                mark=raw["mark"],
                drop_reason=raw["reason"],
                drop_reason_str=drop_reason_name(env, raw["reason"]),
                drop_location=env.symbolize(raw["location"]),
                skb_uid=raw["skb_uid"] or None,
                skb_gen=raw["skb_gen"] or None,
                since_first_ns=raw["since_first_ns"] if raw["skb_uid"] else None,
            ),
            env,
        )
    ]


def translate_stage(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    """One stage of a tracked buffer's lifetime (providers.md 7.2, 9.2)."""
    value = raw["stage"]
    if not 0 <= value < len(STAGES):
        raise ValueError(f"skb_event.stage: unknown nt_skb_stage {value}")
    stage = STAGES[value]
    first = stage in ("rx-first", "tx-first")
    kwargs: dict[str, Any] = envelope(raw, env, "skb", f"skb-{stage}", HOOKS[value])
    if value in INFERRED:
        kwargs["approx"] = list(INFERRED_APPROX)
    return [
        make(
            SkbEvent,
            dict(
                **kwargs,
                skb_uid=raw["skb_uid"],
                skb_gen=raw["skb_gen"],
                len=raw["len"],
                protocol=raw["protocol"],
                stage=stage,
                rc=raw["rc"] if stage == "xmit" else None,
                since_prev_ns=None if first else raw["since_prev_ns"],
                since_first_ns=raw["since_first_ns"],
                end=ENDS.get(raw["end"]),
            ),
            env,
        )
    ]


def translate_drop_count(
    env: KernelEnv, location: int, reason: int, protocol: int, count: int, delta: int, ts_ns: int
) -> KernelRecord:
    """An exact (reason, location, protocol) count read from the `drops` map."""
    kwargs = without_flow(
        {
            "host_id": env.host_id,
            "boot_id": env.boot_id,
            "seq": 0,
            "ts_ns": ts_ns,
            "ts_wall": env.wall(ts_ns),
            "provider": "skb",
            "probe": "drop-count",
            "hook": "map/drops",
        }
    )
    return make(
        DropCount,
        dict(
            **kwargs,
            drop_reason_str=drop_reason_name(env, reason),
            drop_location=env.symbolize(location),
            protocol=protocol,
            count=count,
            delta=delta,
        ),
        env,
    )


def translate_stage_batch(a: npt.NDArray[np.void], env: KernelEnv) -> list[KernelRecord]:
    """translate_stage over a batch, column by column (byte-identical; tested)."""
    stages_raw = a["stage"].tolist()
    if kernel.VALIDATE or not env.wire or any(s >= len(STAGES) for s in stages_raw):
        return row_by_row(a, env, translate_stage)
    stages = [STAGES[s] for s in stages_raw]
    columns = envelope_columns(a, env, "skb", [f"skb-{s}" for s in stages], [HOOKS[s] for s in stages_raw])
    columns.update(
        {
            "approx": [list(INFERRED_APPROX) if s in INFERRED else [] for s in stages_raw],
            "skb_uid": a["skb_uid"].tolist(),
            "skb_gen": a["skb_gen"].tolist(),
            "len": a["len"].tolist(),
            "protocol": a["protocol"].tolist(),
            "stage": stages,
            "rc": [rc if s == "xmit" else None for rc, s in zip(a["rc"].tolist(), stages, strict=True)],
            "since_prev_ns": [
                None if s in ("rx-first", "tx-first") else p
                for p, s in zip(a["since_prev_ns"].tolist(), stages, strict=True)
            ],
            "since_first_ns": a["since_first_ns"].tolist(),
            "end": [ENDS.get(e) for e in a["end"].tolist()],
        }
    )
    return rows_in_wire_order(SkbEvent, columns, len(a))
