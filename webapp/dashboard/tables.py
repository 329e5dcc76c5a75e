"""The record tables the dashboard reads, by name.

The traces app generates one model per record kind at import time (KIND_MODELS), so a
type checker cannot see ``webapp.traces.models.SkbDrop``; these aliases name them once,
typed Any, for the dashboard's queries. Keep in sync with: translators/records.py kinds.
"""

from __future__ import annotations

from typing import Any

from webapp.traces.models import KIND_MODELS

Alert: Any = KIND_MODELS["alert"]
CollectorStats: Any = KIND_MODELS["collector_stats"]
CollectorStatus: Any = KIND_MODELS["collector_status"]
ConnectionSummary: Any = KIND_MODELS["connection"]
DropCount: Any = KIND_MODELS["drop_count"]
FlowCounters: Any = KIND_MODELS["flow_counters"]
IpFlowCounters: Any = KIND_MODELS["ip_flow_counters"]
LossReport: Any = KIND_MODELS["loss_report"]
SamplingReport: Any = KIND_MODELS["sampling_report"]
SiftrSample: Any = KIND_MODELS["siftr_sample"]
SkbDrop: Any = KIND_MODELS["skb_drop"]
SkbEvent: Any = KIND_MODELS["skb_event"]
SockEvent: Any = KIND_MODELS["sock_event"]
StackCounter: Any = KIND_MODELS["stack_counter"]
TcpDebugSnapshot: Any = KIND_MODELS["tcpdebug_snapshot"]
TcpLifecycle: Any = KIND_MODELS["tcp_lifecycle"]
TcpReset: Any = KIND_MODELS["tcp_reset"]
TcpRetransmit: Any = KIND_MODELS["tcp_retransmit"]
TcpSegment: Any = KIND_MODELS["tcp_segment"]
TcpStateChange: Any = KIND_MODELS["tcp_state"]
UdpDatagram: Any = KIND_MODELS["udp_datagram"]
