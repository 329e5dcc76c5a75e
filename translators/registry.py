"""Dispatch: kernel event kind -> translator. Kept apart from the translators themselves.

The kinds are the names of enum nt_event_type in kmod/nettrail.h as listed in
collector/bpf/layout.py EVENT_NAMES; keep the three in sync.
"""

from __future__ import annotations

from translators import ip, siftr, skb, tcp, tcpdebug, udp
from translators.kernel import Translator

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
}
