"""Dispatch: kernel event kind -> translator. Kept apart from the translators themselves.

The kinds are the names of enum nt_event_type in kmod/nettrail.h as listed in
collector/bpf/layout.py EVENT_NAMES; keep the three in sync.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from translators import ip, siftr, skb, tcp, tcp_lifecycle, tcpdebug, udp
from translators.kernel import KernelEnv, KernelRecord, Translator

KERNEL_TRANSLATORS: dict[str, Translator] = {
    "tcp_state": tcp.translate_state,
    "tcp_retransmit": tcp.translate_retransmit,
    "tcp_reset": tcp.translate_reset,
    "tcp_cong_state": tcp.translate_cong,
    "tcp_destroy": tcp.translate_destroy,
    "siftr_sample": siftr.translate_sample,
    "flow_counters": siftr.translate_flow,
    "tcpdebug_snapshot": tcpdebug.translate_debug,
    "skb_drop": skb.translate_drop,
    "udp_fail": udp.translate_fail,
    "ip_packet": ip.translate_packet,
    "skb_stage": skb.translate_stage,
    "udp_datagram": udp.translate_datagram,
    "tcp_lifecycle": tcp_lifecycle.translate_lifecycle,
}

# Column-wise forms of the high-rate kinds: a numpy batch of one kind in, the same records out.
BatchTranslator = Callable[[Any, KernelEnv], list[KernelRecord]]
KERNEL_BATCH_TRANSLATORS: dict[str, BatchTranslator] = {
    "siftr_sample": siftr.translate_sample_batch,
    "ip_packet": ip.translate_packet_batch,
    "skb_stage": skb.translate_stage_batch,
    "tcpdebug_snapshot": tcpdebug.translate_debug_batch,
}
# Kinds whose 4-tuple is the packet's (source first), not a socket's (local first).
PACKET_KINDS = frozenset({"ip_packet", "skb_drop", "skb_stage", "udp_datagram"})
