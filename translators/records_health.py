"""nettrail's own records: self-health (loss, sampling, attach coverage, collector load), stack counters and alerts.

What the collector says about itself (so a reader knows what the trace may be
missing) and what the anomaly rules conclude.

Keep in sync with: ``../shared/docs/anomalies.md`` (rules, alert fields), the H1-H4
self-health rules in collector/health/, docs/records/ (python -m translators.docgen).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from translators.records_envelope import FlowRecord, Record
from translators.records_fields import SEVERITIES, Bool, Float, Int, Str, doc


class LossReport(Record, tag="loss_report", kw_only=True):
    """Tracing blind spots: ring-buffer reservation failures (or malformed input) by event type,
    and (probe `skipped`) runs of a program the kernel skipped because it was already running on that CPU."""

    event_type: Annotated[str, doc("event type that was lost, or '<program> runs' for skipped runs", key=True, brief=True)]
    lost: Annotated[int, doc("events lost since the previous report", brief=True)]
    lost_total: Annotated[int, doc("events lost since the collector started", brief=True)]
    received_total: Annotated[Int, doc("events received since the collector started")] = None
    per_cpu: Annotated[list[int] | None, doc("lost_total per CPU")] = None


class StackCounter(Record, tag="stack_counter", kw_only=True):
    """A TCP/IP MIB counter of /proc/net/netstat or /proc/net/snmp that moved, per network
    namespace (envelope netns; pid/comm: the process in it whose /proc/PID/net was read)."""

    mib: Annotated[str, doc("MIB group of the counter, e.g. TcpExt or Tcp", key=True)]
    counter: Annotated[str, doc("counter name as the kernel spells it, e.g. ListenOverflows", key=True, brief=True, index=True)]
    value: Annotated[int, doc("counter value when read", brief=True)]
    delta: Annotated[int, doc("increase since the previous report (a namespace first seen after the collector started: since it was created)", brief=True)]
    netns_name: Annotated[Str, doc("the network namespace's name under /run/netns; null: unnamed")] = None


class SamplingReport(Record, tag="sampling_report", kw_only=True):
    """H2: how sampled or rate-limited one event type was in one window, from the kernel's exact
    counts (flows, ip_flows, drops maps) against the records the collector emitted."""

    event_type: Annotated[str, doc("record kind that is sampled: siftr_sample, ip_packet, skb_drop or skb_event", key=True, brief=True)]
    setting: Annotated[str, doc("what samples it, e.g. 'ppl 8', 'ip-sample 4', 'drop-rate 100/s per CPU', 'skb-sample 64'", brief=True)]
    window_s: Annotated[float, doc("length of the window the counts cover", unit="s", fmt="%.3f")]
    observed: Annotated[int, doc("events the kernel counted exactly in the window (packets, drops; skb_event: buffer lifetimes started)", brief=True)]
    emitted: Annotated[int, doc("records of event_type emitted for them in the window (skb_event: lifetimes followed, each several records)", brief=True)]
    ratio: Annotated[Float, doc("observed / emitted: one record per this many events; null when none was emitted", fmt="%.2f", brief=True)] = None
    open_s: Annotated[Float, doc("skb_event with --skb-window: how long lifetimes could start within the window (its skb-lifecycle windows' open time); observed counts the lifetimes that started then; null: no windows", unit="s", fmt="%.3f")] = None


class CollectorStatus(Record, tag="collector_status", kw_only=True):
    """H3 attach coverage: what the collector traces on this kernel and which rules therefore
    cannot fire, sent once when it starts (envelope pid/comm: the collector process)."""

    providers: Annotated[list[str], doc("providers chosen (--providers)", brief=True)]
    attached: Annotated[dict[str, int], doc("tracepoint -> kernel id of the program attached to it (bpftool prog show id N)", brief=True)]
    absent: Annotated[list[str], doc("tracepoints the chosen providers use that this kernel lacks (not in tracefs events or BTF): not loaded", brief=True)] = msgspec.field(default_factory=list)
    failed: Annotated[dict[str, str], doc("tracepoint -> why its program could not be attached")] = msgspec.field(default_factory=dict)
    missing_drop_reasons: Annotated[list[str], doc("skb drop reasons the rules look for that this kernel's BTF does not define")] = msgspec.field(default_factory=list)
    rules_unavailable: Annotated[dict[str, str], doc("rule id -> why it cannot fire with these providers on this kernel", brief=True)] = msgspec.field(default_factory=dict)
    rules_degraded: Annotated[dict[str, str], doc("rule id -> the conditions it loses, or the fallback it uses")] = msgspec.field(default_factory=dict)
    degraded: Annotated[dict[str, dict[str, str]], doc("provider -> {field or record: why this kernel cannot give it} (older tracepoint prototypes, absent optional tracepoints)", brief=True)] = msgspec.field(default_factory=dict)
    kernel_release: Annotated[Str, doc("release of the traced kernel (uname -r)")] = None
    ppl: Annotated[Int, doc("siftr: one sample per this many packets of a flow (--ppl)")] = None
    ip_sample: Annotated[Int, doc("ip-flows: one ip_packet record per this many packets of a flow (--ip-sample; 0: none)")] = None
    drop_rate: Annotated[Int, doc("skb: drop events per second per CPU (--drop-rate; 0: all)")] = None
    skb_sample: Annotated[Int, doc("skb-lifecycle: one buffer lifetime followed in this many (--skb-sample; 1: all; null: skb-lifecycle not chosen)")] = None
    skb_stages: Annotated[Str, doc("skb-lifecycle: the stages recorded (--skb-stages): 'all', or 'ends' (first sighting, copy to the reader and end only: no receive entry hook and no transmit start/done stage is recorded); null: skb-lifecycle not chosen", choices=("all", "ends"))] = None
    skb_window: Annotated[Str, doc("skb-lifecycle: its per-buffer hooks attached OPEN seconds of every EVERY, as 'OPEN/EVERY' (--skb-window); null: always attached, or skb-lifecycle not chosen")] = None
    stack_counters: Annotated[Bool, doc("the TCP MIB counters of /proc/net are read (stack_counter records)")] = None
    providers_from: Annotated[Str, doc("who chose the providers: the collector's 'command line', or the 'dashboard' (its tracing request for this host, --providers-from-server)", choices=("command line", "dashboard"))] = None
    untraced_ns: Annotated[Int, doc("the programs were swapped for these (the dashboard changed the set): nothing was traced for this long between the old programs' detach and these programs' attach; null: a start", unit="ns")] = None


class CollectorStats(Record, tag="collector_stats", kw_only=True):
    """H4 self-overhead: the collector's own CPU use, its children's, its programs' kernel
    time and its event rate over one interval (envelope pid/comm: the collector process)."""

    interval_s: Annotated[float, doc("wall-clock length of the interval", unit="s", fmt="%.3f")]
    cpu_time_s: Annotated[float, doc("CPU time (user + system, all threads) the collector used in the interval", unit="s", fmt="%.3f")]
    cpu_total_s: Annotated[float, doc("CPU time the collector used since it started, as /proc/PID/stat utime + stime", unit="s", fmt="%.3f")]
    cpu_percent: Annotated[float, doc("cpu_time_s / interval_s: share of one CPU", unit="%", fmt="%.2f", brief=True)]
    events: Annotated[int, doc("kernel events read from the ring buffer in the interval")]
    events_per_s: Annotated[float, doc("events / interval_s", fmt="%.1f", brief=True)]
    records: Annotated[int, doc("records the collector emitted in the interval")]
    events_by_type: Annotated[dict[str, int], doc("events read in the interval by event type")] = msgspec.field(default_factory=dict)
    rss_bytes: Annotated[Int, doc("resident memory of the collector at the end of the interval", unit="bytes")] = None
    stopped: Annotated[Bool, doc("true on the last record of a collector that stopped (SIGTERM, Ctrl-C, --duration), not at a swap of providers: nothing follows its alerts after it", index=True)] = None
    poll_interval_s: Annotated[Float, doc("siftr-poll: seconds between polls at the end of the interval (--poll-interval, or longer where polling every namespace took more than 2% of a CPU); null: siftr-poll not chosen", unit="s", fmt="%.3f")] = None
    poll_missed: Annotated[dict[str, str], doc("siftr-poll: network namespace inode -> why its sockets could not be polled at its last try (they have no polled samples meanwhile); empty: every namespace was polled")] = msgspec.field(default_factory=dict)
    children_cpu_time_s: Annotated[Float, doc("CPU time (user + system) of the collector's child processes in the interval (the ring keeper: running ones from /proc/PID/stat in clock ticks, ended ones from getrusage(RUSAGE_CHILDREN)); null: from a collector before it was measured", unit="s", fmt="%.3f")] = None
    children_cpu_total_s: Annotated[Float, doc("CPU time of the collector's child processes since it started", unit="s", fmt="%.3f")] = None
    programs_run_time_ns: Annotated[Int, doc("kernel time spent in the collector's own eBPF programs in the interval (sum of their bpf_prog_info run_time_ns, on every CPU and in every context, softirq included); null: unknown (the kernel refused BPF_ENABLE_STATS), never 0 for unknown", unit="ns")] = None
    programs_run_count: Annotated[Int, doc("runs of the collector's own eBPF programs in the interval (sum of their run_cnt); null: unknown")] = None
    programs_run_time_total_ns: Annotated[Int, doc("kernel time in the collector's programs since this session loaded them (a swap of programs starts it again); null: unknown", unit="ns")] = None
    agent_cpu_percent: Annotated[Float, doc("the agent's whole cost: (cpu_time_s + children_cpu_time_s + programs_run_time_ns) / interval_s, in percent of one CPU (what rule H4 checks); null: the programs' time is unknown", unit="%", fmt="%.2f")] = None
    counters_missed: Annotated[dict[str, str], doc("stack counters: network namespace inode -> why its counters could not be read at the last try, or that it is gone in the interval with its moves since its last read unread; empty: every namespace was read")] = msgspec.field(default_factory=dict)


class Alert(FlowRecord, tag="alert", kw_only=True):
    """An anomaly alert (anomalies.md): grouped, with evidence and the thresholds in force."""

    rule_id: Annotated[str, doc("rule identifier, e.g. K1 or P4", key=True, brief=True, index=True)]
    condition: Annotated[Str, doc("which condition of the rule fired, e.g. rto or syn-retry for K2", brief=True)] = None
    alert_id: Annotated[Str, doc("stable id of the alert: every emitted version (open, escalated, closed) repeats it; upsert by it", index=True)] = None
    severity: Annotated[str, doc("info, notice, warning or critical", choices=SEVERITIES, brief=True)]
    status: Annotated[str, doc("open while the condition holds, closed once cleared", choices=("open", "closed"))] = "open"
    proto: Annotated[Str, doc("transport protocol of the flow")] = None
    start: Annotated[float, doc("first time the condition held, seconds since the epoch", unit="s", fmt="%.6f")]
    end: Annotated[Float, doc("last time the condition held", unit="s", fmt="%.6f")] = None
    count: Annotated[int, doc("times the rule fired while this alert was open", brief=True)] = 1
    message: Annotated[str, doc("what happened and why it matters", brief=True)]
    metric: Annotated[Float, doc("the measured value that crossed the threshold")] = None
    thresholds: Annotated[dict[str, float | int | str], doc("thresholds in force when it fired")] = msgspec.field(default_factory=dict)
    evidence: Annotated[list[int], doc("seq numbers (or frame numbers for captures) of the records behind it")] = msgspec.field(default_factory=list)
    incomplete: Annotated[Bool, doc("events were lost or sampled in the window")] = None
    sampling_ratio: Annotated[Float, doc("the rule ran on sampled data: one sample per this many packets of the flow (SIFTR ppl); null: every packet", fmt="%.2f")] = None
    members: Annotated[Int, doc("sockets this finding groups (one cause, one fix target: a process, a listener, a destination): those in the condition now for a held state, else those it struck while open; null: a finding about one subject")] = None
    member_conn_uuids: Annotated[list[str], doc("connection ids (conn_uuid) of the member sockets, the first 50 in the order they joined; members gives the whole count")] = msgspec.field(default_factory=list)
