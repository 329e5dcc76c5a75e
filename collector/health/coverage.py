"""H3 attach coverage: which rules can fire, given the providers chosen and what attached.

Each rule lists the inputs it reads (anomalies.md 4.0, docs/alerts.md "Which records
each rule needs"); an input comes from any of its sources, a source being a provider
that emits it, the tracepoint it fires on and, for drops, the drop reason the kernel
must define. A required input with no working source makes the rule unavailable; a
missing optional input costs the condition named in ``loses``. ``collector_status``
builds the record the collector sends once at start. Keep in sync with
collector/bpf/loader.PROGRAMS, analysis/alerts/rules/ and docs/alerts.md.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from collector.health import process_comm
from translators.kernel import KernelEnv, collector_envelope
from translators.records import CollectorStatus

TCP = frozenset({"tcp"})
SAMPLES = frozenset({"siftr", "tcpdebug"})
DROPS = frozenset({"skb", "skb-lifecycle"})
UDP = frozenset({"udp"})  # per-packet datagram counts: the device's records
UDP_ANY = frozenset({"udp", "udp-calls"})  # what both modes load
STACK = "stack counters"  # not a tracepoint: /proc/net/netstat, read unless --no-stack-counters


@dataclass(frozen=True)
class Source:
    providers: frozenset[str]
    tracepoint: str
    drop_reason: str | None = None
    # what a rule served by this source (not the first) is told, instead of "from ... instead"
    note: str | None = None


@dataclass(frozen=True)
class Input:
    what: str
    sources: tuple[Source, ...]
    loses: str | None = None  # None: required; else the condition lost without this input


def _one(providers: frozenset[str], tracepoint: str, what: str, loses: str | None = None) -> Input:
    return Input(what, (Source(providers, tracepoint),), loses)


STATES = _one(TCP, "inet_sock_set_state", "TCP state changes")
RETRANSMITS = _one(TCP, "tcp_retransmit_skb", "retransmissions")
POLLED = Source(
    frozenset({"siftr-poll"}),
    "siftr_poll",  # an iterator, not a tracepoint
    note="SIFTR samples polled every --poll-interval (siftr-poll), not taken at packets: a change shorter than "
    "the interval can be missed",
)
SAMPLED = Input("SIFTR or tcpdebug samples (cwnd, srtt, windows)", (Source(SAMPLES, "tcp_probe"), POLLED))
DROPPED = _one(DROPS, "kfree_skb", "skb drops")
RESETS = Input("resets", (Source(TCP, "tcp_send_reset"), Source(TCP, "tcp_receive_reset")))

RULE_INPUTS: dict[str, tuple[Input, ...]] = {
    "K1": (RETRANSMITS, SAMPLED),
    "K2": (
        RETRANSMITS,
        _one(TCP, "tcp_retransmit_synack", "SYN-ACK retransmissions", "the SYN-ACK retry share"),
        _one(TCP, "tcp_cong_state_set", "congestion-state changes", "Loss-state entries (RTO told by ca_state only)"),
        Input(
            "packets too big for a forwarding hop's next link",
            (Source(DROPS, "kfree_skb", "PKT_TOO_BIG"),),
            "path-MTU black holes (pmtu-black-hole)",
        ),
    ),
    "K3": (RESETS, STATES),
    "K4": (
        Input(
            "listen overflows",
            (Source(DROPS, "kfree_skb", "TCP_LISTEN_OVERFLOW"), Source(frozenset(), STACK)),
        ),
    ),
    "K5": (
        Input("receive windows from samples", (Source(SAMPLES, "tcp_probe"), POLLED), "the zero-window condition"),
        Input(
            "receive-buffer drops",
            tuple(Source(DROPS, "kfree_skb", r) for r in ("TCP_ZEROWINDOW", "SOCKET_RCVBUFF", "SOCKET_BACKLOG")),
            "the receive-buffer drop conditions",
        ),
    ),
    "K6": (SAMPLED, _one(TCP, "tcp_cong_state_set", "congestion-state changes", "Loss entries between samples")),
    "K7": (SAMPLED,),
    "K8": (STATES, _one(TCP, "tcp_retransmit_synack", "SYN-ACK retransmissions", "server-side half-open handshakes")),
    "K9": (
        STATES,
        RESETS,
        Input("no-socket drops", (Source(DROPS, "kfree_skb", "NO_SOCKET"),), "probes to closed ports without a RST"),
    ),
    "K10": (STATES,),
    "K11": (
        DROPPED,
        _one(UDP_ANY, "udp_fail_queue_rcv_skb", "UDP queueing failures", "queueing failures (udp_fail_queue_rcv_skb)"),
        _one(UDP, "netif_receive_skb", "UDP datagram counts", "the receive-buffer drop share (the rate still counts)"),
    ),
    "K12": (DROPPED,),
    "K13": (SAMPLED,),
    "K14": (STATES, _one(TCP, "tcp_receive_reset", "resets received", "refused connects")),
}
# Every drop reason a rule looks for: those missing from the kernel's BTF are reported.
WATCHED_DROP_REASONS = sorted(
    {s.drop_reason for inputs in RULE_INPUTS.values() for i in inputs for s in i.sources if s.drop_reason}
)


@dataclass(frozen=True)
class Attach:
    """What the collector has: providers chosen, tracepoints attached or not, kernel drop reasons."""

    providers: frozenset[str]
    attached: frozenset[str]
    absent: frozenset[str]
    failed: dict[str, str]
    drop_reasons: frozenset[str]
    stack_counters: bool

    def why_not(self, s: Source) -> str | None:
        """None when the source works, else why not."""
        if s.tracepoint == STACK:
            return None if self.stack_counters else "the stack counters are off (--no-stack-counters)"
        if not s.providers & self.providers:
            return f"provider {' or '.join(sorted(s.providers))} not chosen (--providers)"
        if s.tracepoint in self.absent:
            return f"tracepoint {s.tracepoint} absent on this kernel"
        if s.tracepoint in self.failed:
            return f"tracepoint {s.tracepoint} failed to attach ({self.failed[s.tracepoint]})"
        if s.tracepoint not in self.attached:
            return f"tracepoint {s.tracepoint} not attached"
        if s.drop_reason is not None and s.drop_reason not in self.drop_reasons:
            return f"drop reason {s.drop_reason} not in this kernel's BTF"
        return None


def _missing(inp: Input, have: Attach) -> str | None:
    reasons = [have.why_not(s) for s in inp.sources]
    if any(r is None for r in reasons):
        return None
    return f"{inp.what}: {'; '.join(dict.fromkeys(r for r in reasons if r))}"


def assess(have: Attach) -> tuple[dict[str, str], dict[str, str]]:
    """(unavailable, degraded): rule id -> why, for the rules that lose anything."""
    unavailable: dict[str, str] = {}
    degraded: dict[str, str] = {}
    for rule, inputs in RULE_INPUTS.items():
        required = [m for i in inputs if i.loses is None and (m := _missing(i, have))]
        optional = [(i, m) for i in inputs if i.loses is not None and (m := _missing(i, have))]
        if required or (optional and len(optional) == len(inputs)):
            unavailable[rule] = "no " + " and no ".join(required or [m for _, m in optional])
        elif optional:
            degraded[rule] = "; ".join(f"without {i.loses} ({m})" for i, m in optional)
        fallback = _fallback(inputs, have)
        if fallback and rule not in unavailable:
            degraded[rule] = "; ".join(x for x in (degraded.get(rule), fallback) if x)
    return unavailable, degraded


def _fallback(inputs: Iterable[Input], have: Attach) -> str | None:
    """A required input served by a later source because the first one does not work."""
    notes = []
    for i in inputs:
        first, *rest = i.sources
        why = have.why_not(first)
        if i.loses is None and why and rest and any(have.why_not(s) is None for s in rest):
            usable = next(s for s in rest if have.why_not(s) is None)
            notes.append(usable.note or f"{i.what} from the {usable.tracepoint} instead ({why})")
    return "; ".join(notes) or None


def collector_status(
    env: KernelEnv,
    providers: Iterable[str],
    program_ids: dict[str, int],
    absent: Iterable[str],
    failed: dict[str, str],
    drop_reasons: Iterable[str],
    *,
    stack_counters: bool,
    ppl: int,
    ip_sample: int,
    drop_rate: int,
    skb_sample: int | None = None,
    skb_stages: str | None = None,
    skb_window: str | None = None,
    lost: dict[str, dict[str, str]] | None = None,
    providers_from: str = "command line",
    untraced_ns: int | None = None,
) -> CollectorStatus:
    """The H3 status record; ``lost``: provider -> {field: why} this kernel cannot give
    (collector/bpf/variants.py), besides the rules that lose inputs."""
    chosen = list(providers)
    reasons = frozenset(drop_reasons)
    have = Attach(frozenset(chosen), frozenset(program_ids), frozenset(absent), dict(failed), reasons, stack_counters)
    unavailable, degraded = assess(have)
    pid = os.getpid()
    return CollectorStatus(
        **collector_envelope(env, "status", "collector/start"), pid=pid, tgid=pid, comm=process_comm(),
        providers=chosen, attached=dict(program_ids), absent=list(absent), failed=dict(failed),
        missing_drop_reasons=[r for r in WATCHED_DROP_REASONS if r not in reasons],
        rules_unavailable=unavailable, rules_degraded=degraded, kernel_release=os.uname().release,
        ppl=ppl, ip_sample=ip_sample, drop_rate=drop_rate, skb_sample=skb_sample, skb_stages=skb_stages,
        skb_window=skb_window, stack_counters=stack_counters, degraded=lost or {}, providers_from=providers_from, untraced_ns=untraced_ns,
    )  # fmt: skip
