"""The rare paths of the TCP sequence analysis: retransmission classification (upstream
Wireshark and Wireshark 4.0), ACKed-unseen segments, retiring acknowledged segments
(ACK RTT) and bytes in flight.

A mixin of :class:`analysis.flows.tcp_analysis.TcpAnalyzer`, kept apart from its hot
loop so that each file reads as one part of packet-tcp.c's
``tcp_analyze_sequence_number``.

Keep in sync with: anomalies.md §3 (the order of the checks), tcp_analysis.py (callers).
"""

from __future__ import annotations

from analysis.flows.tcp_state import (
    ACKLOST,
    FAST,
    FIN,
    KA,
    M32,
    OOO,
    RETRANS,
    SPURIOUS,
    SYN,
    WUPDATE,
    ZWP,
    Conv,
    Flow,
    gt,
)

# Wireshark keeps these time differences in an unsigned 64-bit integer (guint64 t): a
# packet stamped before the one it is timed from (capture timestamps that step back, as
# a loaded multi-CPU capture host makes them) is "very late", never "0 ns later". So such
# a segment is no fast retransmission and no out-of-order segment, but a retransmission.
U64 = (1 << 64) - 1


class SequenceChecks:
    """Classification helpers; ``compat`` is "upstream" or "4.0" (set by TcpAnalyzer)."""

    compat: str

    def _acked_unseen(self, fwd: Flow, rev: Flow, seq: int, ack: int, aflags: int) -> int:
        if ack == ((fwd.lastack + 1) & M32) and seq == fwd.nextseq and rev.lastsegmentflags & ZWP:
            rev.nextseq = ack
            rev.maxseqtobeacked = ack
            return aflags | WUPDATE
        if self.compat == "4.0":  # 4.0 jumps straight to the highest sequence seen
            rev.maxseqtobeacked = rev.nextseq
            return aflags | ACKLOST
        tail_le = tail_re = 0
        for s in reversed(rev.segs):  # Wireshark walks newest first
            if tail_le == tail_re:
                tail_le, tail_re = s[0], s[1]
            if not gt(ack, s[0]):  # s.seq >= ack
                if s[1] == tail_le:
                    tail_le = s[0]
                else:
                    tail_le, tail_re = s[0], s[1]
        if ack == tail_le and gt(tail_re, ack):
            rev.maxseqtobeacked = tail_re
        else:
            rev.maxseqtobeacked = ack
        return aflags | ACKLOST

    def _retransmission(
        self, conv: Conv, fwd: Flow, rev: Flow, ts: int, seq: int, seglen: int, flags: int, aflags: int
    ) -> int:
        if aflags & KA:
            return aflags
        nextseq_f = fwd.nextseq
        not_advanced = bool(nextseq_f) and gt(nextseq_f, seq)
        if seglen > 1 and ((nextseq_f - 1) & M32) == seq:
            not_advanced = False
        end = (seq + seglen) & M32
        if seglen > 0 and rev.lastack and not gt(end, rev.lastack):
            return aflags | SPURIOUS
        if not not_advanced:
            return aflags
        t = (ts - rev.lastacktime) & U64
        if t < 20_000_000:
            if rev.dupacknum >= 2 and rev.lastack == seq:
                return aflags | FAST
            if rev.sack and rev.lastack == seq:
                count = 0
                inside = True
                for left, right in rev.sack:
                    count += (right - left) & M32
                    inside = inside and seq >= left and end <= right
                if not inside and count > 2 * rev.mss:
                    return aflags | FAST
            if rev.dupacknum >= 2 and rev.sack:
                if not any(seq >= left and end <= right for left, right in rev.sack):
                    return aflags | FAST
        thres = conv.irtt_ns & U64 if conv.irtt_ns else 3_000_000
        seen = False
        for s in reversed(fwd.segs):  # newest first, like Wireshark's list
            if not gt(s[0], seq) and not gt(end, s[1]):
                seen = True
                s[4] = 1
                break
        if t < thres and not seen:
            if nextseq_f != ((end + (1 if flags & (SYN | FIN) else 0)) & M32):
                return aflags | OOO
            if fwd.lastacklen == 0:
                return aflags | OOO
        return aflags | RETRANS

    def _retransmission_40(
        self, conv: Conv, fwd: Flow, rev: Flow, ts: int, seq: int, seglen: int, flags: int, aflags: int
    ) -> int:
        """Wireshark 4.0's classification (Debian 12's tshark): entered only when the sequence
        did not advance; spurious checked before the "new data after a probe" exception
        (seq = nextseq - 1, more than one byte), which then skips the rest (tshark 4.0.17 on
        tests/test_flows_fidelity.py's capture); fast retransmission from duplicate ACKs
        alone; out-of-order timed from the packet that last advanced nextseq."""
        nextseq_f = fwd.nextseq
        if not (nextseq_f and gt(nextseq_f, seq)):
            return aflags
        if aflags & KA:
            return aflags
        not_advanced = not (seglen > 1 and ((nextseq_f - 1) & M32) == seq)
        end = (seq + seglen) & M32
        if seglen > 0 and rev.lastack and not gt(end, rev.lastack):
            return aflags | SPURIOUS
        if not not_advanced:
            # new data after a 1-byte zero window probe (seq = nextseq - 1, more than one
            # byte): 4.0 leaves the retransmission family without a flag, like upstream
            return aflags
        t = (ts - rev.lastacktime) & U64
        if rev.dupacknum >= 2 and rev.lastack == seq and t < 20_000_000:
            return aflags | FAST
        t = (ts - fwd.nextseqtime) & U64
        thres = conv.irtt_ns & U64 if conv.irtt_ns else 3_000_000
        if nextseq_f != ((end + (1 if flags & (SYN | FIN) else 0)) & M32) and t < thres:
            return aflags | OOO
        return aflags | RETRANS

    @staticmethod
    def _fill(fwd: Flow, seq: int, seglen: int) -> None:
        """Data that lands in a hole (a retransmission of what the capture first missed)
        shrinks it: Zeek's reassembler only reports what it never got."""
        end = (seq + seglen) & M32
        kept: list[list[int]] = []
        for start, stop in fwd.holes:
            if not gt(stop, seq) or not gt(end, start):  # no overlap
                kept.append([start, stop])
                continue
            if gt(seq, start):
                kept.append([start, seq])
            if gt(stop, end):
                kept.append([end, stop])
        fwd.holes = kept

    @staticmethod
    def _settle(conv: Conv, side: Flow, ack: int) -> None:
        """The peer ACKed past holes of `side` that nothing filled: the receiver had the bytes,
        the capture did not. Zeek reports them then as a content gap (g/G) and counts them
        in missed_bytes; a hole the peer never ACKs past is settled at the end (`settle_all`)."""
        kept: list[list[int]] = []
        for start, stop in side.holes:
            if gt(stop, ack):
                kept.append([start, stop])
            else:
                side.missed += (stop - start) & M32
                conv.z.letter("g", side is conv.orig)
        side.holes = kept

    @classmethod
    def settle_all(cls, conv: Conv) -> None:
        """At the end of the capture: the holes still open are gaps (Zeek flushes them at close)."""
        for side in (conv.flow1, conv.flow2):
            if side.holes:
                cls._settle(conv, side, side.holes[-1][1])

    def _retire(self, rev: Flow, ack: int, ts: int) -> int | None:
        """Drop segments of the other direction covered by this ACK; -> ack RTT (ns) of the acked segment."""
        segs = rev.segs
        rtt = None
        if rev.ordered:
            n = 0
            partial = False
            for s in segs:
                if not gt(s[1], ack):  # old or exactly acked: retire
                    if partial:
                        break  # not a prefix after all: fall back to the full scan below
                    if rtt is None and s[1] == ack:
                        rtt = ts - s[3]
                    n += 1
                elif gt(ack, s[0]):  # partly acked: trim
                    if rtt is None:
                        rtt = ts - s[3]
                    s[0] = ack
                    partial = True
                else:
                    if n:
                        del segs[:n]
                    return rtt
            else:
                if n:
                    del segs[:n]
                return rtt
            if n:
                del segs[:n]
        keep = []
        for s in segs:
            if s[1] == ack:
                if rtt is None:
                    rtt = ts - s[3]
            elif gt(ack, s[0]) and not gt(ack, s[1]):
                if rtt is None:
                    rtt = ts - s[3]
                s[0] = ack
                keep.append(s)
            elif gt(s[1], ack):
                keep.append(s)
        rev.segs = keep
        rev.ordered = all(not gt(a[0], b[0]) and not gt(a[1], b[1]) for a, b in zip(keep, keep[1:], strict=False))
        return rtt

    def _in_flight(self, fwd: Flow, rev: Flow, seglen: int, flags: int) -> int | None:
        if not seglen or not fwd.segs or not fwd.valid_bif:
            return None
        first = min(s[0] for s in fwd.segs)
        last = max(s[1] for s in fwd.segs)
        value = (last - first) & M32
        for left, right in rev.sack:
            value = (value - ((right - left) & M32)) & M32
        if not 0 < value < 2_000_000_000:
            return None
        return value - 1 if flags & (SYN | FIN) else value
