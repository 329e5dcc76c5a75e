"""Wireshark's TCP sequence analysis (tcp.analysis.*), packet by packet in capture order.

This mirrors ``tcp_analyze_sequence_number`` of Wireshark's packet-tcp.c as described
in anomalies.md §3: the same per-direction state, the same checks in the same order
with the same early exits, the same conversation-reuse rule and window-scale handling.
Nothing is "improved"; where we knowingly differ it is documented in docs/analyze.md.

Flags are a bitmask per packet; bit i is ``TCP_ANALYSIS_FLAGS[i]`` (records.py order).
Per connection we count packets per flag the way tshark's display filter
``tcp.analysis.<flag>`` counts them, so a fast or spurious retransmission is also a
retransmission.

Speed: this is the hot loop of ``nettrail analyze``. The per-direction state lives in
``__slots__`` objects, the unacked-segment list is retired by prefix while it is in
sequence order (the common case) and scanned whole only after disorder, and the
rare paths (retransmission classification, ACKed-unseen) are kept out of the way, in
tcp_checks.py; the state the analysis keeps is in tcp_state.py.

Keep in sync with: anomalies.md §3 (semantics), tcp_state.py (flag bits, Flow, Conv),
tcp_checks.py, analysis/flows/conn_summary.py (Zeek letters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from analysis.flows import conn_summary as zeek
from analysis.flows.tcp_checks import SequenceChecks
from analysis.flows.tcp_state import (
    ACK,
    ANY_RETRANS,
    COMPLETE_ACK,
    COMPLETE_DATA,
    COMPLETE_FIN,
    COMPLETE_RST,
    COMPLETE_SYN,
    COMPLETE_SYNACK,
    DUPACK,
    EVENT_MASK,
    FAST,
    FIN,
    FLAG_BITS,
    HALF,
    KA,
    KAACK,
    LOST,
    M32,
    MAX_UNACKED,
    RETRANS,
    REUSED,
    RST,
    RTO_MIN_NS,
    SFR,
    SPURIOUS,
    SYN,
    WFULL,
    WUPDATE,
    ZW,
    ZWP,
    ZWPACK,
    Conv,
    Event,
    FirstReset,
    Flow,
    PacketResult,
    gt,
    scaled_window,
)
from translators.packet_layers import TcpOptions

# Open holes kept per direction: a capture of one side only never settles them by an ACK,
# and while any is open its packets take the full path
MAX_HOLES = 64


class TcpAnalyzer(SequenceChecks):
    """Feeds packets in file order; ``conversations`` holds every tcp.stream."""

    def __init__(self, keep_results: bool = False, compat: str = "upstream") -> None:
        self.compat = compat
        self.active: dict[tuple[int, int, int, int], Conv] = {}
        self.conversations: list[Conv] = []
        self.keep_results = keep_results
        self.on_new: Callable[[Conv], None] | None = None

    # --- conversation lookup --------------------------------------------------------

    def _lookup(self, src: int, sport: int, dst: int, dport: int, ip_ver: int, ts: int) -> tuple[Conv, bool]:
        key = (src, sport, dst, dport) if (src, sport) <= (dst, dport) else (dst, dport, src, sport)
        conv = self.active.get(key)
        if conv is not None:
            return conv, False
        return self._new(key, src, sport, dst, dport, ip_ver, ts), True

    def _new(
        self, key: tuple[int, int, int, int], src: int, sport: int, dst: int, dport: int, ip_ver: int, ts: int
    ) -> Conv:
        conv = Conv(
            stream=len(self.conversations), flow1=Flow(src, sport), flow2=Flow(dst, dport), ip_ver=ip_ver, first_ts=ts
        )
        self.active[key] = conv
        self.conversations.append(conv)
        return conv

    # --- one packet -------------------------------------------------------------------

    def packet(
        self, frame: int, ts: int, ip_ver: int, src: int, sport: int, dst: int, dport: int,
        seq: int, ack: int, flags: int, win: int, seglen: int, ip_len: int, opts: TcpOptions | None,
    ) -> PacketResult | None:  # fmt: skip
        conv, is_new = self._lookup(src, sport, dst, dport, ip_ver, ts)
        f1 = conv.flow1
        if f1.addr == src and f1.port == sport:
            fwd, rev = f1, conv.flow2
        else:
            fwd, rev = conv.flow2, f1
        aflags = 0
        synack = flags & (SYN | ACK)
        if synack and flags & SYN and fwd.base_set:
            if self.compat == "4.0":
                # 4.0: only a pure SYN with a new ISN starts a new conversation; a SYN-ACK
                # with a new ISN is flagged in the old one, a SYN repeating the ISN after a
                # FIN or RST is that conversation's retransmission (one tcp.stream)
                if seq != fwd.base_seq:
                    aflags |= REUSED
                    if synack == SYN:
                        conv, fwd, rev = self._reuse(conv, src, sport, dst, dport, ip_ver, ts)
                        is_new = True
                elif synack == SYN:
                    fwd.nextseq = fwd.maxseqtobeacked
            elif seq != fwd.base_seq or conv.completeness & (COMPLETE_RST | COMPLETE_FIN):
                conv, fwd, rev = self._reuse(conv, src, sport, dst, dport, ip_ver, ts)
                aflags |= REUSED
                is_new = True
            elif synack == SYN:
                fwd.nextseq = fwd.maxseqtobeacked
        if not fwd.base_set:
            if flags & SYN:
                fwd.base_seq = seq
                fwd.saw_syn = True
            else:
                fwd.base_seq = (seq - 1) & M32
            fwd.base_set = True
        if not rev.base_set and flags & ACK:
            rev.base_seq = (ack - 1) & M32
            rev.base_set = True
        rseq = (seq - fwd.base_seq) & M32
        rack = (ack - rev.base_seq) & M32 if flags & ACK else ack
        if is_new:
            self._direction(conv, fwd, rev, synack)
        res = self._analyze(conv, fwd, rev, frame, ts, rseq, rack, seglen, flags, win, aflags)
        self._after(conv, fwd, rev, is_new, ts, flags, seglen, win, opts, ip_ver, rseq)
        # counters and summary
        conv.last_ts = ts
        fwd.packets += 1
        fwd.bytes += seglen
        fwd.wire_bytes += ip_len
        flags_now = self._last_flags
        if seglen:
            fwd.data_segments += 1
            if flags_now & ANY_RETRANS:
                fwd.retrans_bytes += seglen
        if flags_now:
            counts = conv.counts
            if flags_now & (FAST | SPURIOUS):
                flags_now |= RETRANS
            for i, (_name, bit) in enumerate(FLAG_BITS):
                if flags_now & bit:
                    counts[i] += 1
            if flags_now & EVENT_MASK:
                conv.events.append(Event(frame, ts, fwd is conv.orig, flags_now, rseq, rack, self._dupnum))
        if win == 0 and not flags & (SYN | RST):
            if fwd.zw_since < 0:
                fwd.zw_since = ts
        elif fwd.zw_since >= 0:
            conv.zw_stalls.append((fwd.zw_since, ts, fwd is conv.orig))
            fwd.zw_since = -1
        if flags & (SYN | RST) or flags_now & ANY_RETRANS:
            self._for_findings(conv, fwd, rev, frame, ts, flags, flags_now, seglen, rseq)
        z = conv.z
        bit = (1 if seglen else 2) << (0 if fwd is conv.orig else 2)
        if not z.quiet or not z.plain & bit or flags & SFR or flags_now & (ANY_RETRANS | LOST) or win == 0:
            zeek.tcp_event(z, fwd is conv.orig, flags, rseq, seglen, win, bool(flags_now & ANY_RETRANS), False)
        if fwd.holes and seglen:
            self._fill(fwd, rseq, seglen)
        if rev.holes and flags & ACK:
            self._settle(conv, rev, rack)
        if res is not None:
            res.is_orig = fwd is conv.orig
            res.window_scaled = scaled_window(fwd, win, flags)
        return res

    @staticmethod
    def _for_findings(
        conv: Conv, fwd: Flow, rev: Flow, frame: int, ts: int, flags: int, aflags: int, seglen: int, rseq: int
    ) -> None:
        """What the findings need beyond the flag counts (analysis/flows/findings.py): SYNs
        sent, the first RST with the states and data before it, timeout retransmissions.
        Called before the packet updates the Zeek endpoint states."""
        if flags & SYN:
            if not fwd.syns:
                fwd.syn_first = ts
            fwd.syns += 1
            fwd.syn_last = ts
        if flags & RST:
            conv.resets += 1
            if conv.first_reset is None:
                by_orig = fwd is conv.orig
                o_bytes, r_bytes = (fwd.bytes, rev.bytes) if by_orig else (rev.bytes, fwd.bytes)
                states = (conv.z.states[0], conv.z.states[1])
                conv.first_reset = FirstReset(frame, ts, by_orig, states, o_bytes, r_bytes)
        if seglen and aflags & RETRANS and not aflags & (FAST | SPURIOUS):
            # when was this data last sent? (the unacked list holds every transmission, this
            # one last; a missing original leaves the cause unknown)
            last = -1
            for entry in fwd.segs:
                if entry[0] == rseq and entry[2] != frame and entry[3] > last:
                    last = entry[3]
            if last >= 0 and ts - last >= RTO_MIN_NS:
                fwd.retrans_timeout += 1

    def feed_columns(self, cols: tuple[list[Any], ...]) -> None:
        """Analyse TCP packets given as columns (Decoded.tcp_columns), in capture order.

        In-order data segments and advancing pure ACKs of established connections take
        an inlined path that performs exactly the checks that can fire for them
        (window full; everything else is ruled out by the guard); any packet that
        fails the guard goes through :meth:`packet`, the full state machine. Only for
        analysers without per-packet results: bytes-in-flight bookkeeping is skipped."""
        full = self.packet
        active = self.active
        m32, half, ack_only, wfull, max_unacked = M32, HALF, ACK, WFULL, MAX_UNACKED  # locals: the loop runs per packet
        # (src, sport, dst, dport) -> (conv, fwd, rev) for established conversations; both
        # directions of a tuple are dropped whenever the full path runs for it, since it may
        # change what _side tested, or create or replace the tuple's conversation (it touches
        # no other conversation: dropping only these keeps the cache warm across hundreds of
        # interleaved lossy connections)
        sides: dict[tuple[int, int, int, int], tuple[Conv, Flow, Flow, bool, bool]] = {}
        for frame, ts, ver, src, sport, dst, dport, seq, ack, flags, win, seglen, ip_len, opts in zip(
            *cols, strict=True
        ):
            if flags & 0x17 != ack_only or opts is not None or win == 0:
                full(frame, ts, ver, src, sport, dst, dport, seq, ack, flags, win, seglen, ip_len, opts)
                sides.pop((src, sport, dst, dport), None)
                sides.pop((dst, dport, src, sport), None)
                continue
            key = (src, sport, dst, dport)
            hit = sides.get(key)
            if hit is None:
                conv = active.get(key if (src, sport) <= (dst, dport) else (dst, dport, src, sport))
                if conv is None or conv.orig is None:
                    full(frame, ts, ver, src, sport, dst, dport, seq, ack, flags, win, seglen, ip_len, opts)
                    sides.pop((src, sport, dst, dport), None)
                    sides.pop((dst, dport, src, sport), None)
                    continue
                hit = sides[key] = self._side(conv, src, sport)
            conv, fwd, rev, ok_data, ok_ack = hit
            rseq = (seq - fwd.base_seq) & m32
            rack = (ack - rev.base_seq) & m32
            maxrev = rev.maxseqtobeacked
            if rseq != fwd.nextseq or not rseq or (maxrev and 0 < ((rack - maxrev) & m32) < half):
                full(frame, ts, ver, src, sport, dst, dport, seq, ack, flags, win, seglen, ip_len, opts)
                sides.pop((src, sport, dst, dport), None)
                sides.pop((dst, dport, src, sport), None)
                continue
            if seglen:
                end = (rseq + seglen) & m32
                lastack_r = rev.lastack
                if (
                    not ok_data or rack != fwd.lastack or (seglen == 1 and rev.window == 0)
                    or (lastack_r and not 0 < ((end - lastack_r) & m32) < half)
                ):  # fmt: skip
                    full(frame, ts, ver, src, sport, dst, dport, seq, ack, flags, win, seglen, ip_len, opts)
                    sides.pop((src, sport, dst, dport), None)
                    sides.pop((dst, dport, src, sport), None)
                    continue
                aflags = 0
                ws = rev.win_scale
                if ws != -1:
                    shift = 0 if rev.is_first_ack or ws == -2 else ws
                    if end == (lastack_r + ((rev.window << shift) & m32)) & m32:
                        aflags = wfull
                segs = fwd.segs
                if len(segs) < max_unacked:
                    if segs and fwd.ordered:
                        last = segs[-1]
                        if 0 < ((last[0] - rseq) & m32) < half or 0 < ((last[1] - end) & m32) < half:
                            fwd.ordered = False
                    segs.append([rseq, end, frame, ts, 0])
                fwd.lastacklen = seglen
                fwd.nextseq = end
                fwd.nextseqtime = ts
                if rseq == fwd.maxseqtobeacked or not fwd.maxseqtobeacked:
                    fwd.maxseqtobeacked = end
                fwd.data_segments += 1
                fwd.bytes += seglen
                if aflags:
                    conv.counts[8] += 1
                    conv.events.append(Event(frame, ts, fwd is conv.orig, aflags, rseq, rack))
            else:
                if not ok_ack or rack == fwd.lastack:
                    full(frame, ts, ver, src, sport, dst, dport, seq, ack, flags, win, seglen, ip_len, opts)
                    sides.pop((src, sport, dst, dport), None)
                    sides.pop((dst, dport, src, sport), None)
                    continue
                fwd.lastnondupack = frame
                fwd.dupacknum = 0
                if rseq == fwd.maxseqtobeacked or not fwd.maxseqtobeacked:
                    fwd.maxseqtobeacked = fwd.nextseq
                aflags = 0
            fwd.window = win
            fwd.lastack = rack
            fwd.lastacktime = ts
            fwd.lastsegmentflags = aflags
            rsegs = rev.segs
            if rsegs and (not rev.ordered or 0 < ((rack - rsegs[0][0]) & m32) < half):
                rtt = None
                if rev.ordered:  # retire the prefix this ACK covers (the `_retire` rules, inlined)
                    n = 0
                    for entry in rsegs:
                        nxt = entry[1]
                        if nxt == rack:
                            if rtt is None:
                                rtt = ts - entry[3]
                        elif 0 < ((nxt - rack) & m32) < half:
                            if 0 < ((rack - entry[0]) & m32) < half:
                                n = -1  # partly acknowledged: let _retire trim it
                            break
                        n += 1
                    if n >= 0:
                        del rsegs[:n]
                    else:
                        rtt = self._retire(rev, rack, ts)
                else:
                    rtt = self._retire(rev, rack, ts)
                if rtt is not None:
                    rev.rtt_n += 1
                    rev.rtt_sum += rtt
                    if rev.rtt_n == 1 or rtt < rev.rtt_min:
                        rev.rtt_min = rtt
                    if rtt > rev.rtt_max:
                        rev.rtt_max = rtt
            conv.last_ts = ts
            fwd.packets += 1
            fwd.wire_bytes += ip_len

    @staticmethod
    def _side(conv: Conv, src: int, sport: int) -> tuple[Conv, Flow, Flow, bool, bool]:
        """(conv, fwd, rev, data may take the fast path, pure ACKs may) for packets from src:sport.

        Everything tested here changes only in the full path, which drops the tuple from the cache."""
        f1 = conv.flow1
        fwd, rev = (f1, conv.flow2) if f1.addr == src and f1.port == sport else (conv.flow2, f1)
        z = conv.z
        shift = 0 if fwd is conv.orig else 2
        ok = (
            not fwd.sack and fwd.zw_since < 0 and not fwd.is_first_ack and z.quiet
            and not (conv.ts_mru_syn and not conv.irtt_ns) and not fwd.holes and not rev.holes
        )  # fmt: skip
        ok_data = ok and bool(z.plain & (1 << shift)) and bool(conv.completeness & COMPLETE_DATA)
        ok_ack = ok and bool(z.plain & (2 << shift)) and bool(conv.completeness & COMPLETE_ACK)
        return conv, fwd, rev, ok_data, ok_ack

    @staticmethod
    def _direction(conv: Conv, fwd: Flow, rev: Flow, synack: int) -> None:
        """Originator: the sender of a first pure SYN; else the higher port is the client (guessed)."""
        if synack == SYN:
            conv.orig, conv.guessed = fwd, False
        elif synack == SYN | ACK:
            conv.orig, conv.guessed = rev, True
        else:
            conv.orig, conv.guessed = (fwd, True) if fwd.port >= rev.port else (rev, True)
        conv.z.flipped = conv.orig is not fwd

    def _reuse(
        self, old: Conv, src: int, sport: int, dst: int, dport: int, ip_ver: int, ts: int
    ) -> tuple[Conv, Flow, Flow]:
        key = (src, sport, dst, dport) if (src, sport) <= (dst, dport) else (dst, dport, src, sport)
        conv = self._new(key, src, sport, dst, dport, ip_ver, ts)
        return conv, conv.flow1, conv.flow2

    # --- tcp_analyze_sequence_number ----------------------------------------------------

    def _analyze(
        self, conv: Conv, fwd: Flow, rev: Flow, frame: int, ts: int, seq: int, ack: int, seglen: int, flags: int, window: int, aflags: int
    ) -> PacketResult | None:  # fmt: skip
        dupnum = 0
        dupframe = 0
        nextseq_f = fwd.nextseq
        if flags & ACK:
            rev.valid_bif = True
        # 1. zero window probe
        if seglen == 1 and seq == nextseq_f and rev.window == 0:
            aflags |= ZWP
        else:
            sfr = flags & SFR
            # 2. zero window
            if window == 0 and not sfr:
                aflags |= ZW
            # 3. previous segment not captured
            if nextseq_f and gt(seq, nextseq_f) and not flags & RST:
                aflags |= LOST
                fwd.valid_bif = False
                fwd.holes.append([nextseq_f, seq])
                if len(fwd.holes) > MAX_HOLES:  # nobody ACKs (a one-sided capture): the oldest is a gap now
                    self._settle(conv, fwd, fwd.holes[0][1])
            # 4. keep-alive
            if seglen <= 1 and seq == ((nextseq_f - 1) & M32) and not sfr:
                aflags |= KA
            same = seq == nextseq_f and ack == fwd.lastack and not sfr and seglen == 0
            # 5. window update
            if same and window and window != fwd.window:
                aflags |= WUPDATE
            # 6. window full
            if seglen > 0 and rev.win_scale != -1 and not sfr:
                shift = 0 if rev.is_first_ack or rev.win_scale == -2 else rev.win_scale
                if ((seq + seglen) & M32) == ((rev.lastack + ((rev.window << shift) & M32)) & M32):
                    aflags |= WFULL
            if same and window and window == fwd.window and rev.lastsegmentflags & KA:
                aflags |= KAACK  # 7. keep-alive ACK
            elif (
                seglen == 0 and window == 0 and window == fwd.window and seq == nextseq_f
                and (ack == fwd.lastack or ack == ((fwd.lastack + 1) & M32))
                and rev.lastsegmentflags & ZWP and not sfr
            ):  # fmt: skip
                aflags |= ZWPACK  # 8. zero window probe ACK
                if ack == ((fwd.lastack + 1) & M32):
                    rev.nextseq = ack
                    rev.maxseqtobeacked = ack
            elif same and window and window == fwd.window:
                fwd.dupacknum += 1  # 9. duplicate ACK
                aflags |= DUPACK
                dupnum = fwd.dupacknum
                dupframe = fwd.lastnondupack
        # 10. finished_fwd
        if ack != fwd.lastack:
            fwd.lastnondupack = frame
            fwd.dupacknum = 0
        # 11. ACKed unseen segment
        if rev.maxseqtobeacked and gt(ack, rev.maxseqtobeacked) and flags & ACK:
            aflags = self._acked_unseen(fwd, rev, seq, ack, aflags)
        # 12. retransmission family
        if seglen > 0 or flags & (SYN | FIN):
            classify = self._retransmission_40 if self.compat == "4.0" else self._retransmission
            aflags = classify(conv, fwd, rev, ts, seq, seglen, flags, aflags)
        # 13. state updates
        nextseq = (seq + seglen) & M32
        if flags & (SYN | FIN):
            nextseq = (nextseq + 1) & M32
        if (seglen or flags & (SYN | FIN)) and len(fwd.segs) < MAX_UNACKED:
            segs = fwd.segs
            if segs and fwd.ordered:
                last = segs[-1]
                if gt(last[0], seq) or gt(last[1], nextseq):
                    fwd.ordered = False
            segs.append([seq, nextseq, frame, ts, 1 if aflags & ANY_RETRANS else 0])
        if not fwd.nextseq or gt(nextseq, (fwd.nextseq + (1 if flags & (SYN | FIN) else 0)) & M32):
            fwd.lastacklen = seglen
        if (gt(nextseq, fwd.nextseq) or not fwd.nextseq) and not aflags & ZWP:
            fwd.nextseq = nextseq
            fwd.nextseqframe = frame
            fwd.nextseqtime = ts
        if (seq == fwd.maxseqtobeacked or not fwd.maxseqtobeacked) and not aflags & ZWP:
            fwd.maxseqtobeacked = fwd.nextseq
        fwd.window = window
        fwd.lastack = ack
        fwd.lastacktime = ts
        fwd.lastsegmentflags = aflags
        rtt = self._retire(rev, ack, ts) if rev.segs else None
        if rtt is not None:
            rev.rtt_n += 1
            rev.rtt_sum += rtt
            if rev.rtt_n == 1 or rtt < rev.rtt_min:
                rev.rtt_min = rtt
            if rtt > rev.rtt_max:
                rev.rtt_max = rtt
        self._last_flags = aflags
        self._dupnum = dupnum
        if not self.keep_results:
            return None
        return PacketResult(
            conv, False, aflags, seq, ack, None, dupnum, dupframe, rtt, self._in_flight(fwd, rev, seglen, flags)
        )

    # --- after the analysis: handshake bookkeeping and options ----------------------------

    def _after(
        self, conv: Conv, fwd: Flow, rev: Flow, is_new: bool, ts: int, flags: int, seglen: int, win: int,
        opts: TcpOptions | None, ip_ver: int, rseq: int,
    ) -> None:  # fmt: skip
        synack = flags & (SYN | ACK)
        if is_new and synack == SYN:
            conv.completeness |= COMPLETE_SYN | (COMPLETE_DATA if seglen else 0)
        if synack == SYN | ACK:
            conv.completeness |= COMPLETE_SYNACK
        elif synack == ACK:
            conv.completeness |= COMPLETE_DATA if seglen else COMPLETE_ACK
        if flags & (FIN | ACK) == FIN | ACK:
            conv.completeness |= COMPLETE_FIN
        if flags & RST:
            conv.completeness |= COMPLETE_RST
        if flags & SYN:
            if not flags & ACK:
                conv.ts_mru_syn = ts
            fwd.is_first_ack = True
        if synack == ACK:
            if conv.ts_mru_syn and not conv.first_rtt:
                conv.first_rtt = max(ts - conv.ts_mru_syn, 0) or 1
            if conv.ts_mru_syn and not conv.irtt_ns:
                conv.irtt_ns = ts - conv.ts_mru_syn
            fwd.is_first_ack = False
        rev_base = rev.base_seq
        if opts is not None:
            if opts.mss is not None:
                fwd.mss = opts.mss
            if opts.wscale is not None and flags & SYN:
                fwd.win_scale = min(opts.wscale, 14)
            fwd.sack = (
                [((left - rev_base) & M32, (right - rev_base) & M32) for left, right in opts.sack[:4]]
                if opts.sack
                else []
            )
        elif fwd.sack:
            fwd.sack = []
        if is_new and fwd.mss == -1:
            fwd.mss = rev.mss = 536 if ip_ver == 4 else 1220
        if flags & SYN:
            if fwd.win_scale == -1:
                fwd.win_scale = rev.win_scale = -2
            elif synack == SYN | ACK and rev.win_scale == -2:
                fwd.win_scale = -2

    _last_flags = 0
    _dupnum = 0
    fast: Any = None  # analysis/flows/tcp_fast.py's FastPath once chosen, False: the Python path
