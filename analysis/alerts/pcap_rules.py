"""Pcap-derived alerts P1-P7 (anomalies.md §3.5), evaluated per connection after the analysis.

Inputs are what the TCP analyser keeps per conversation: the flagged-packet events,
zero-window episodes, per-direction data-segment counts and the handshake RTT. Every
alert carries the thresholds in force and the frame numbers behind it (``evidence``).

Keep in sync with: anomalies.md §3.5 and §5 (defaults), analysis/flows/tcp_state.py
(Event, Conv), translators.records.Alert.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from analysis.flows.tcp_state import ACKLOST, ANY_RETRANS, DUPACK, KA, LOST, OOO, REUSED, ZWP, Conv, Flow
from translators.records import SEVERITIES, Alert, Finding


@dataclass(frozen=True)
class Thresholds:
    retrans_ratio: float = 0.15  # P1, ntopng's "TCP packets issues" default
    ooo_ratio: float = 0.15  # P2
    min_data_segments: int = 20  # P1/P2 basis
    gap_grace_s: float = 2.0  # P3: gaps this early are normal for a capture started mid-stream
    zw_probes: int = 3  # P4
    zw_stall_s: float = 1.0  # P4
    dupack_storm: int = 3  # P5
    dupack_fallback_irtt_s: float = 0.020  # P5 when the handshake was not captured
    dupack_min_slack_s: float = 0.001  # P5: a capture's clock resolution and stack latency
    reuse_per_minute: int = 10  # P6
    max_evidence: int = 20


@dataclass
class AlertSink:
    """Builds Alert records with the envelope of the capture."""

    env: Callable[[Conv | None, float], dict[str, Any]]
    out: list[Alert] = field(default_factory=list)
    worst: dict[int, int] = field(default_factory=dict)  # stream -> rank of its most severe alert so far

    def add(self, conv: Conv | None, flow: tuple[str, int, str, int, int] | None, **kw: Any) -> None:
        start = kw["start"]
        if conv is not None:
            rank = SEVERITIES.index(kw["severity"])
            self.worst[conv.stream] = max(self.worst.get(conv.stream, -1), rank)
        fields = self.env(conv, start)
        if flow is not None:
            fields.update(src=flow[0], sport=flow[1], dst=flow[2], dport=flow[3], ip_ver=flow[4])
        self.out.append(Alert(**fields, proto="tcp", **kw))


def evaluate(
    convs: list[Conv],
    sink: AlertSink,
    endpoints: Callable[[Conv], tuple[str, int, str, int, int]],
    th: Thresholds = Thresholds(),
) -> list[Alert]:
    """Run P1-P6 over every conversation; returns the alerts in connection order."""
    for conv in convs:
        if conv.orig is None:
            continue
        ends = endpoints(conv)
        for rule in (_p1_p2, _p3, _p4, _p5):
            rule(conv, ends, sink, th)
    _p6(convs, sink, endpoints, th)
    return sink.out


def _sides(conv: Conv) -> Iterator[tuple[bool, Flow]]:
    assert conv.orig is not None
    other = conv.flow2 if conv.orig is conv.flow1 else conv.flow1
    yield True, conv.orig
    yield False, other


def _label(is_orig: bool) -> str:
    return "originator" if is_orig else "responder"


def _p1_p2(conv: Conv, ends: tuple[str, int, str, int, int], sink: AlertSink, th: Thresholds) -> None:
    for is_orig, flow in _sides(conv):
        data = flow.data_segments
        if data < th.min_data_segments:
            continue
        for rule, mask, limit, severity, what in (
            ("P1", ANY_RETRANS, th.retrans_ratio, "warning", "retransmitted"),
            ("P2", OOO, th.ooo_ratio, "notice", "out of order"),
        ):
            hits = [e for e in conv.events if e.orig == is_orig and e.flags & mask]
            ratio = len(hits) / data
            if ratio <= limit:
                continue
            sink.add(
                conv, ends, rule_id=rule, severity=severity, start=hits[0].ts / 1e9, end=hits[-1].ts / 1e9, count=len(hits),
                message=f"{len(hits)} of {data} data segments from the {_label(is_orig)} were {what} ({ratio:.1%})",
                metric=round(ratio, 6), thresholds={"ratio": limit, "min_data_segments": th.min_data_segments},
                evidence=[e.frame for e in hits[: th.max_evidence]],
            )  # fmt: skip


def _p3(conv: Conv, ends: tuple[str, int, str, int, int], sink: AlertSink, th: Thresholds) -> None:
    late = conv.first_ts + int(th.gap_grace_s * 1e9)
    hits = [e for e in conv.events if e.flags & (LOST | ACKLOST) and e.ts > late]
    if not hits:
        return
    sink.add(
        conv, ends, rule_id="P3", severity="notice", start=hits[0].ts / 1e9, end=hits[-1].ts / 1e9, count=len(hits),
        message=f"capture incomplete: {len(hits)} segments missing from the capture after the first {th.gap_grace_s:g} s (not network loss)",
        metric=float(len(hits)), thresholds={"grace_s": th.gap_grace_s}, evidence=[e.frame for e in hits[: th.max_evidence]],
    )  # fmt: skip


def _p4(conv: Conv, ends: tuple[str, int, str, int, int], sink: AlertSink, th: Thresholds) -> None:
    episodes = list(conv.zw_stalls)
    for is_orig, flow in _sides(conv):
        if flow.zw_since >= 0:
            episodes.append((flow.zw_since, -1, is_orig))
    # Linux probes a closed window with a zero-length segment one below snd_una, which
    # Wireshark calls a keep-alive; both kinds count as probes here. Picked out once: a bulk
    # transfer can have thousands of short episodes and a million events.
    candidates = [e for e in conv.events if e.flags & (ZWP | KA)] if episodes else []
    for start, end, receiver_is_orig in episodes:
        stop = end if end >= 0 else conv.last_ts
        probes = [e for e in candidates if e.orig != receiver_is_orig and start <= e.ts <= stop]
        duration = (stop - start) / 1e9
        if len(probes) < th.zw_probes and duration < th.zw_stall_s:
            continue
        reopened = (
            f"reopened after {duration:.3f} s"
            if end >= 0
            else f"still closed after {duration:.3f} s at the end of the capture"
        )
        sink.add(
            conv, ends, rule_id="P4", severity="warning", start=start / 1e9, end=stop / 1e9, count=max(len(probes), 1),
            message=f"zero-window stall: the {_label(receiver_is_orig)} closed its window; {len(probes)} probes; {reopened}",
            metric=round(duration, 6), thresholds={"probes": th.zw_probes, "stall_s": th.zw_stall_s},
            evidence=[e.frame for e in probes[: th.max_evidence]],
        )  # fmt: skip


def _p5(conv: Conv, ends: tuple[str, int, str, int, int], sink: AlertSink, th: Thresholds) -> None:
    runs: dict[tuple[bool, int], list[Any]] = {}
    for e in conv.events:
        if e.flags & DUPACK:
            runs.setdefault((e.orig, e.ack), []).append(e)
    irtt = conv.first_rtt / 1e9 if conv.first_rtt else th.dupack_fallback_irtt_s
    # The sender may react before the third duplicate (RACK/SACK recovery) and, seen from
    # the receiver, its retransmission arrives a round trip later: accept any retransmission
    # of the acknowledged segment from the first duplicate to 2 iRTT (at least 1 ms) after the third.
    slack = max(2 * irtt, th.dupack_min_slack_s)
    retransmitted: dict[tuple[bool, int], list[int]] | None = None  # (sender is orig, seq) -> times
    for (acker_is_orig, ack), dups in runs.items():
        if len(dups) < th.dupack_storm:
            continue
        if retransmitted is None:  # once per connection, not once per run of duplicates
            retransmitted = {}
            for e in conv.events:
                if e.flags & ANY_RETRANS:
                    retransmitted.setdefault((e.orig, e.seq), []).append(e.ts)
        third = dups[th.dupack_storm - 1].ts
        deadline = third + int(slack * 1e9)
        reacted = any(dups[0].ts <= ts <= deadline for ts in retransmitted.get((not acker_is_orig, ack), ()))
        if reacted:
            continue
        sink.add(
            conv, ends, rule_id="P5", severity="notice", start=dups[0].ts / 1e9, end=dups[-1].ts / 1e9, count=len(dups),
            message=f"{len(dups)} duplicate ACKs from the {_label(acker_is_orig)} for the same segment, no retransmission of it within {slack * 1000:.3f} ms",
            metric=float(len(dups)), thresholds={"dup_acks": th.dupack_storm, "window_s": round(slack, 6)},
            evidence=[e.frame for e in dups[: th.max_evidence]],
        )  # fmt: skip


def _p6(
    convs: list[Conv], sink: AlertSink, endpoints: Callable[[Conv], tuple[str, int, str, int, int]], th: Thresholds
) -> None:
    """More than N reused-port SYNs per minute toward one (client, server, server port)."""
    families: dict[tuple[str, str, int], list[tuple[int, int, Conv]]] = {}
    for conv in convs:
        if conv.orig is None:
            continue
        for e in conv.events:
            if e.flags & REUSED:
                src, _sport, dst, dport, _ver = endpoints(conv)
                families.setdefault((src, dst, dport), []).append((e.ts, e.frame, conv))
    for (src, dst, dport), hits in families.items():
        hits.sort(key=lambda h: h[0])
        lo = 0
        for hi in range(len(hits)):
            while hits[hi][0] - hits[lo][0] > 60_000_000_000:
                lo += 1
            if hi - lo + 1 > th.reuse_per_minute:
                window = hits[lo : hi + 1]
                conv = window[0][2]
                ends = endpoints(conv)
                sink.add(
                    conv, (src, 0, dst, dport, ends[4]), rule_id="P6", severity="notice", start=window[0][0] / 1e9,
                    end=window[-1][0] / 1e9, count=len(window),
                    message=f"{len(window)} connections reused ports from {src} to {dst}:{dport} within a minute (port exhaustion or aggressive reuse)",
                    metric=float(len(window)), thresholds={"per_minute": th.reuse_per_minute},
                    evidence=[h[1] for h in window[: th.max_evidence]],
                )  # fmt: skip
                break


def p7(
    convs: list[Conv],
    sink: AlertSink,
    endpoints: Callable[[Conv], tuple[str, int, str, int, int]],
    findings_of: Callable[[Conv], list[Finding]],
) -> list[Alert]:
    """P7: connections whose worst finding (analysis/flows/findings.py) is a notice or worse
    raise an alert at that severity, one per server address and kind of finding (a port
    scan of 45 refused connects is one alert, not 45), unless P1-P6 already raised one at
    least as severe for the connection: findings count towards the alerts without
    repeating them."""
    rank = {s: i for i, s in enumerate(SEVERITIES)}
    groups: dict[tuple[str, str, str], list[tuple[Conv, Finding]]] = {}
    for conv in convs:
        if conv.orig is None:
            continue
        found = findings_of(conv)
        if not found or rank[found[0].severity] < rank["notice"]:  # findings come worst first
            continue
        top = found[0]
        if sink.worst.get(conv.stream, -1) >= rank[top.severity]:
            continue
        groups.setdefault((endpoints(conv)[2], top.kind, top.severity), []).append((conv, top))
    for (server, _kind, severity), members in groups.items():
        conv, top = members[0]
        flow = endpoints(conv)
        start = min(f.ts if f.ts is not None else c.first_ts / 1e9 for c, f in members)
        ports = {endpoints(c)[3] for c, _ in members}
        n = len(members)
        more = f"; and {n - 1} more connection{'s' if n > 2 else ''} to {server} the same way" if n > 1 else ""
        sink.out.append(Alert(
            **sink.env(conv, start), src=flow[0], sport=flow[1] if n == 1 else 0, dst=server,
            dport=flow[3] if len(ports) == 1 else 0, ip_ver=flow[4], proto="tcp", rule_id="P7", severity=severity,
            start=start, end=max(c.last_ts for c, _ in members) / 1e9, count=n, message=top.message + more,
            metric=float(n), thresholds={"severity": "notice"},
            evidence=[f.frame for _, f in members if f.frame is not None][:20],
        ))  # fmt: skip
    return sink.out
