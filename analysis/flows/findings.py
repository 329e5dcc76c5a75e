"""Per-connection findings: what went wrong with one connection, in plain words, with a severity.

Wireshark's Expert Info flags packets; a finding explains a connection: refused, reset
(by which side, in which state, after how much data), zero-window stalls (how many, how
long, which share of the connection's life, who stalled), retransmissions (how many,
which rate, by cause), handshake failures and SYN retries, half-open or one-sided
connections, an incomplete capture. Each rule is in docs/analyze.md ("Findings"); the
thresholds are the constants below. Findings come worst first, then in the order of
FINDING_KINDS. They also feed the P7 alert (analysis/alerts/pcap_rules.py).

Inputs are what the TCP analyser keeps per conversation (tcp_state.Conv and Flow: flag
counts, events, zero-window episodes, SYN counts, the first RST) and the Zeek summary.
Keep in sync with: translators/records_tcp.py (Finding, FINDING_KINDS), docs/analyze.md,
analysis/flows/capture_flows.py (the caller).
"""

from __future__ import annotations

from analysis.flows import conn_summary as zeek
from analysis.flows.tcp_state import ACKLOST, ANY_RETRANS, FAST, LOST, OOO, SPURIOUS, ZW, Conv, Flow
from translators.records import FINDING_KINDS, SEVERITIES, Finding

ZW_WARNING_SHARE = 1 / 3  # stalled longer than this share of the life: warning
ZW_NOTICE_SHARE = 0.10  # ... than this, or one episode >= ZW_NOTICE_EPISODE_S: notice
ZW_NOTICE_EPISODE_S = 1.0  # P4's stall threshold
RETRANS_WARNING_RATIO = 0.15  # P1's ratio ...
RETRANS_WARNING_MIN_SEGMENTS = 20  # ... on P1's basis
RETRANS_NOTICE_RATIO = 0.02  # above this, or any timeout retransmission: notice
SIDE = {True: "orig", False: "resp"}
WHO = {True: "originator", False: "responder"}
_RANK = {s: i for i, s in enumerate(SEVERITIES)}
_ORDER = {k: i for i, k in enumerate(FINDING_KINDS)}


def ordered(found: list[Finding]) -> list[Finding]:
    """Worst first; equal severities in the order of FINDING_KINDS (stable for the side)."""
    return sorted(found, key=lambda f: (-_RANK[f.severity], _ORDER[f.kind]))


def worst(found: list[Finding]) -> str | None:
    return max((f.severity for f in found), key=_RANK.__getitem__, default=None)


def amount(n: int) -> str:
    """Bytes for a sentence: '0 bytes', '1,448 bytes', '2.3 MB' (decimal, like a person says it)."""
    if n < 10_000:
        return f"{n:,} byte{'' if n == 1 else 's'}"
    unit, size = next((u, s) for u, s in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)) if n >= s)
    return f"{n / size:.1f} {unit}"


def seconds(s: float) -> str:
    return f"{s * 1000:.0f} ms" if s < 1 else f"{s:.2f} s"


def _ts(ns: int) -> float:
    return round(ns / 1e9, 6)


def plural(n: int, word: str) -> str:
    if n == 1:
        return f"1 {word}"
    return f"{n:,} {word[:-1] + 'ies' if word.endswith('y') else word + 's'}"


def tcp_findings(conv: Conv, conn_state: str) -> list[Finding]:
    """Every finding of one TCP conversation, worst first."""
    assert conv.orig is not None
    o = conv.orig
    r = conv.flow2 if o is conv.flow1 else conv.flow1
    life = (conv.last_ts - conv.first_ts) / 1e9
    found = _handshake(conv, o, r, conn_state)
    found += _reset(conv, conn_state)
    found += _zero_window(conv, life)
    for is_orig, flow in ((True, o), (False, r)):
        found += _retransmissions(conv, flow, is_orig)
    found += _shape(conv, o, r, conn_state)
    found += _capture(conv, o, r)
    if conv.icmp_error:
        found.append(_icmp(conv.icmp_error, conv.icmp_errors))
    found += _minor(conv)
    return ordered(found)


def udp_findings(packets: tuple[int, int], icmp_error: str | None, icmp_errors: int) -> list[Finding]:
    """A UDP flow: an ICMP error quoting it, or traffic in one direction only."""
    found = [_icmp(icmp_error, icmp_errors)] if icmp_error else []
    if packets[1] == 0:
        found.append(Finding(kind="one_sided", severity="info", side="orig", count=packets[0],
                             message=f"no reply: {plural(packets[0], 'datagram')} from the originator only"))  # fmt: skip
    return ordered(found)


# --- the rules -------------------------------------------------------------------------------------


def _handshake(conv: Conv, o: Flow, r: Flow, state: str) -> list[Finding]:
    out: list[Finding] = []
    syns = o.syns if o.saw_syn else 0
    spent = (o.syn_last - o.syn_first) / 1e9
    if state == "REJ":
        rst = conv.first_reset
        out.append(Finding(
            kind="refused", severity="notice", side="resp",
            message="refused: the responder answered the SYN with a reset (nothing listening, or a firewall)",
            frame=rst.frame if rst else None, ts=_ts(rst.ts) if rst else None,
        ))  # fmt: skip
    elif state == "S0" and syns:
        out.append(Finding(
            kind="no_answer", severity="notice", side="resp", count=syns, seconds=round(spent, 6),
            message=f"no answer: {plural(syns, 'SYN')} over {seconds(spent)}, never answered "
            "(host down, packets dropped, or the reply took another path)",
            ts=_ts(o.syn_first),
        ))  # fmt: skip
    elif conv.z.states[0] == zeek.SYN_SENT and conv.z.states[1] == zeek.SYN_ACK_SENT:
        out.append(Finding(
            kind="handshake_incomplete", severity="notice", side="orig",
            message="handshake incomplete: the responder's SYN-ACK was never acknowledged",
        ))  # fmt: skip
    if syns > 1:
        out.append(Finding(
            kind="syn_retries", severity="notice", side="orig", count=syns - 1, seconds=round(spent, 6),
            message=f"SYN sent {syns} times: {plural(syns - 1, 'retry')} over {seconds(spent)} before "
            + ("the answer" if r.syns else "giving up"),
            ts=_ts(o.syn_first),
        ))  # fmt: skip
    return out


STATE_WORDS = {"handshake": "during the handshake", "established": "while established",
               "closing": "while closing", "closed": "after both sides had closed"}  # fmt: skip


def reset_state(states: tuple[int, int]) -> str:
    """Where a connection was from its Zeek endpoint states just before a RST."""
    handshake = (zeek.SYN_SENT, zeek.SYN_ACK_SENT)
    if states[0] in handshake or states[1] in handshake:
        return "handshake"
    closed = [s == zeek.CLOSED for s in states]
    if all(closed):
        return "closed"
    return "closing" if any(closed) else "established"


def _reset(conv: Conv, state: str) -> list[Finding]:
    rst = conv.first_reset
    if rst is None or state == "REJ":
        return []
    where = reset_state(rst.states)
    data = rst.bytes_orig + rst.bytes_resp
    after = (
        "before any data"
        if not data
        else f"after {amount(rst.bytes_orig)} from the originator and {amount(rst.bytes_resp)} from the responder"
    )
    more = f" ({plural(conv.resets, 'RST')} in all)" if conv.resets > 1 else ""
    return [Finding(
        kind="reset", severity="info" if where == "closed" else "notice", side=SIDE[rst.by_orig], count=conv.resets,
        data_bytes=data, state=where, frame=rst.frame, ts=_ts(rst.ts),
        message=f"reset by the {WHO[rst.by_orig]} {STATE_WORDS[where]}, {after}{more}",
    )]  # fmt: skip


def _zero_window(conv: Conv, life: float) -> list[Finding]:
    """Episodes from the first zero-window advertisement to the window reopening (or the end
    of the capture), grouped by the side that closed its window."""
    episodes = list(conv.zw_stalls)
    assert conv.orig is not None
    for is_orig, flow in ((True, conv.orig), (False, conv.flow2 if conv.orig is conv.flow1 else conv.flow1)):
        if flow.zw_since >= 0:
            episodes.append((flow.zw_since, -1, is_orig))
    out: list[Finding] = []
    for receiver in (True, False):
        mine = [(s, (e if e >= 0 else conv.last_ts)) for s, e, who in episodes if who == receiver]
        if not mine:
            continue
        stalled = sum(e - s for s, e in mine) / 1e9
        longest = max(e - s for s, e in mine) / 1e9
        share = stalled / life if life > 0 else 0.0
        if share > ZW_WARNING_SHARE:
            severity = "warning"
        elif share >= ZW_NOTICE_SHARE or longest >= ZW_NOTICE_EPISODE_S:
            severity = "notice"
        else:
            severity = "info"
        first = next((e for e in conv.events if e.flags & ZW and e.orig == receiver), None)
        open_now = any(e < 0 for _, e, who in episodes if who == receiver)
        out.append(Finding(
            kind="zero_window", severity=severity, side=SIDE[receiver], count=len(mine), seconds=round(stalled, 6),
            ratio=round(share, 4), frame=first.frame if first else None, ts=_ts(mine[0][0]),
            message=f"zero-window stall: the {WHO[receiver]} closed its receive window {plural(len(mine), 'time')}, "
            f"stalling the {WHO[not receiver]} for {seconds(stalled)} in all ({share:.0%} of the connection's life)"
            + ("; still closed at the end of the capture" if open_now else ""),
        ))  # fmt: skip
    return out


def _retransmissions(conv: Conv, flow: Flow, is_orig: bool) -> list[Finding]:
    hits = [e for e in conv.events if e.orig == is_orig and e.flags & ANY_RETRANS and e.seq != 0]
    if not hits:
        return []
    n = len(hits)
    fast = sum(1 for e in hits if e.flags & FAST)
    spurious = sum(1 for e in hits if e.flags & SPURIOUS)
    timeout = flow.retrans_timeout
    ratio = n / flow.data_segments if flow.data_segments else 0.0
    if ratio > RETRANS_WARNING_RATIO and flow.data_segments >= RETRANS_WARNING_MIN_SEGMENTS:
        severity = "warning"
    elif ratio > RETRANS_NOTICE_RATIO or timeout:
        severity = "notice"
    else:
        severity = "info"
    causes = [f"{v} {k}" for k, v in (("fast", fast), ("after a timeout", timeout), ("spurious", spurious)) if v]
    other = n - fast - timeout - spurious
    if other and causes:
        causes.append(f"{other} other")
    why = f" ({', '.join(causes)})" if causes else ""
    return [Finding(
        kind="retransmissions", severity=severity, side=SIDE[is_orig], count=n, ratio=round(ratio, 4),
        fast=fast, timeout=timeout, spurious=spurious, frame=hits[0].frame, ts=_ts(hits[0].ts),
        message=f"{plural(n, 'retransmission')} by the {WHO[is_orig]}: {ratio:.1%} of its "
        f"{plural(flow.data_segments, 'data segment')}{why}",
    )]  # fmt: skip


def _shape(conv: Conv, o: Flow, r: Flow, state: str) -> list[Finding]:
    """Half-open (Zeek's SH/SHR: a SYN or SYN-ACK then a FIN, never answered) and one-sided
    connections (only one direction in the capture, when no handshake finding explains it)."""
    if state in ("SH", "SHR"):
        by_orig = state == "SH"
        return [Finding(
            kind="half_open", severity="notice", side=SIDE[by_orig],
            message=f"half-open: the {WHO[by_orig]} opened and closed without ever hearing from the "
            f"{WHO[not by_orig]}",
        )]  # fmt: skip
    if state in ("S0", "REJ", "RSTOS0", "RSTRH") or (o.packets and r.packets):
        return []
    silent = not o.packets
    return [Finding(
        kind="one_sided", severity="info", side=SIDE[silent], count=max(o.packets, r.packets),
        message=f"one-sided: only the {WHO[not silent]}'s packets are in the capture (the other direction "
        "took another path or was filtered out)",
    )]  # fmt: skip


def _capture(conv: Conv, o: Flow, r: Flow) -> list[Finding]:
    """What the capture itself misses: the start of the connection, segments inside it."""
    out: list[Finding] = []
    if not o.saw_syn and not r.saw_syn:
        out.append(Finding(
            kind="capture_incomplete", severity="info",
            message="capture incomplete: it began after the connection was set up (no handshake seen)",
            ts=_ts(conv.first_ts),
        ))  # fmt: skip
    gaps = [e for e in conv.events if e.flags & (LOST | ACKLOST)]
    if gaps:
        missed = o.missed + r.missed
        out.append(Finding(
            kind="capture_incomplete", severity="info", count=len(gaps), data_bytes=missed,
            frame=gaps[0].frame, ts=_ts(gaps[0].ts),
            message=f"capture incomplete: {plural(len(gaps), 'packet')} point at segments the capture missed "
            f"({amount(missed)} known missing; not network loss)",
        ))  # fmt: skip
    return out


def _icmp(error: str, count: int) -> Finding:
    return Finding(
        kind="icmp_unreachable", severity="notice", count=count or 1,
        message=f"ICMP {error} {'once' if count <= 1 else f'{count} times'}: a router or the host refused it",
    )  # fmt: skip


def _minor(conv: Conv) -> list[Finding]:
    """Out-of-order segments and port reuse: worth a line, rarely a problem by themselves."""
    out: list[Finding] = []
    ooo = [e for e in conv.events if e.flags & OOO]
    if ooo:
        out.append(Finding(
            kind="out_of_order", severity="info", count=len(ooo), frame=ooo[0].frame, ts=_ts(ooo[0].ts),
            message=f"{plural(len(ooo), 'segment')} out of order (reordered on the path)",
        ))  # fmt: skip
    if conv.counts[0]:  # reused_ports: the SYN that started this conversation
        out.append(Finding(
            kind="reused_port", severity="info", count=conv.counts[0],
            message="reused ports: a new connection on the addresses and ports of an earlier one",
        ))  # fmt: skip
    return out
