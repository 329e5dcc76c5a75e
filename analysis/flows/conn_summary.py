"""Zeek-style connection summary: endpoint states, history letters, conn_state (anomalies.md §2).

Each flow keeps one :class:`ZeekFlow`. The TCP analyser calls :func:`tcp_event` for the
packets that can change it (see ``ZeekFlow.quiet``) and :func:`conn_state` at export.
Endpoint states follow Zeek's TCP analyser in outline: INACTIVE, SYN_SENT,
SYN_ACK_SENT, PARTIAL (midstream), ESTABLISHED, CLOSED, RESET.

Keep in sync with: anomalies.md §2.1 (the order of the conn_state decisions) and §2.2
(letters and their repeat rules); translators.records.Connection (conn_state, history).
"""

from __future__ import annotations

import re

INACTIVE, SYN_SENT, SYN_ACK_SENT, PARTIAL, ESTABLISHED, CLOSED, RESET = range(7)
FIN, SYN, RST, ACK = 0x01, 0x02, 0x04, 0x10

_RSTOS0 = re.compile(r"\^?S[^HAFGIQ]*R.*")
# letters recorded once per direction; letters that repeat on a new sequence number;
# letters counted on a log10 scale (1st, 10th, 100th ... occurrence)
_ONCE = frozenset("adiq")
_BY_SEQ = frozenset("fhrs")
_LOG = frozenset("cgtw")


class ZeekFlow:
    """Endpoint states, history and byte counts of one connection."""

    __slots__ = ("states", "history", "seen", "last_seq", "counts", "thresholds", "sizes", "quiet", "flipped", "plain")

    def __init__(self) -> None:
        self.states = [INACTIVE, INACTIVE]  # [orig, resp]
        self.history: list[str] = []
        self.seen: set[str] = set()
        self.last_seq: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self.thresholds: dict[str, int] = {}
        self.sizes = [0, 0]
        self.quiet = False  # both endpoints established: plain packets only matter through `plain`
        # letters a plain packet would add, already recorded: bit (0 orig, 2 resp) + (0 data, 1 ack)
        self.plain = 0
        self.flipped = False

    def letter(self, ch: str, is_orig: bool, seq: int = 0) -> None:
        key = ch.upper() if is_orig else ch
        if ch in _ONCE:
            if key in self.seen:
                return
            self.seen.add(key)
        elif ch in _BY_SEQ:
            if self.last_seq.get(key) == seq:
                return
            self.last_seq[key] = seq
        elif ch in _LOG:
            n = self.counts.get(key, 0) + 1
            self.counts[key] = n
            if n < self.thresholds.get(key, 1):
                return
            self.thresholds[key] = self.thresholds.get(key, 1) * 10
        self.history.append(key)


def tcp_event(
    z: ZeekFlow, is_orig: bool, flags: int, seq: int, payload: int, window: int, retrans: bool, gap: bool
) -> None:
    """Update endpoint states and history for one TCP packet of the flow."""
    me = 0 if is_orig else 1
    peer = 1 - me
    syn, fin, rst, ack = flags & SYN, flags & FIN, flags & RST, flags & ACK
    if syn and (fin or rst):
        z.letter("q", is_orig)
    elif fin and rst:
        z.letter("i", is_orig)
    if syn:
        z.letter("h" if ack else "s", is_orig, seq)
    if fin:
        z.letter("f", is_orig, seq)
    if rst:
        z.letter("r", is_orig, seq)
    if payload > 0:
        z.letter("d", is_orig)
    elif ack and not (syn or fin or rst):
        z.letter("a", is_orig)
    if retrans and payload > 0:
        z.letter("t", is_orig)
    if gap:
        z.letter("g", is_orig)
    if window == 0 and not (syn or rst):
        z.letter("w", is_orig)
    z.sizes[me] += payload
    _transition(z, me, peer, syn, fin, rst, ack)
    z.quiet = z.states[0] == ESTABLISHED and z.states[1] == ESTABLISHED
    z.plain = ("D" in z.seen) | ("A" in z.seen) << 1 | ("d" in z.seen) << 2 | ("a" in z.seen) << 3


def _transition(z: ZeekFlow, me: int, peer: int, syn: int, fin: int, rst: int, ack: int) -> None:
    st = z.states
    if rst:
        # Zeek (TCPSessionAdapter::UpdateClosedState): after a complete FIN exchange a RST
        # changes neither side's state, so the connection stays SF (its `r` is recorded)
        if not (st[me] == CLOSED and st[peer] == CLOSED):
            st[me] = RESET
        return
    if fin:
        st[me] = CLOSED
        return
    if syn:
        if st[me] in (INACTIVE, PARTIAL, SYN_SENT, SYN_ACK_SENT):
            st[me] = SYN_ACK_SENT if ack else SYN_SENT
        if ack and st[peer] == SYN_SENT:
            pass  # the peer becomes established when it acknowledges this SYN-ACK
        return
    if st[me] == INACTIVE:
        st[me] = PARTIAL
    elif st[me] in (SYN_SENT, SYN_ACK_SENT) and ack:
        st[me] = ESTABLISHED
        if st[peer] in (SYN_SENT, SYN_ACK_SENT):
            st[peer] = ESTABLISHED


def conn_state(z: ZeekFlow, proto: str) -> str:
    """Zeek's conn_state from the two endpoint states, in Zeek's decision order."""
    os_, rs = z.states
    if proto != "tcp":  # UDP: who sent anything at all
        if os_ != INACTIVE:
            return "SF" if rs != INACTIVE else "S0"
        return "SHR" if rs != INACTIVE else "OTH"
    o_inactive = os_ in (INACTIVE, PARTIAL)
    r_inactive = rs in (INACTIVE, PARTIAL)
    if rs == RESET:
        if os_ in (SYN_SENT, SYN_ACK_SENT) or (os_ == RESET and z.sizes == [0, 0]):
            return "REJ"
        return "RSTRH" if o_inactive else "RSTR"
    if os_ == RESET:
        if r_inactive:
            return "RSTOS0" if _RSTOS0.fullmatch(history(z)) else "OTH"
        return "RSTO"
    if rs == CLOSED and os_ == CLOSED:
        return "SF"
    if os_ == CLOSED:
        return "SH" if r_inactive else "S2"
    if rs == CLOSED:
        return "SHR" if o_inactive else "S3"
    if os_ == SYN_SENT and rs == INACTIVE:
        return "S0"
    if os_ == ESTABLISHED and rs == ESTABLISHED:
        return "S1"
    return "OTH"


def udp_event(z: ZeekFlow, is_orig: bool, payload: int) -> None:
    me = 0 if is_orig else 1
    z.states[me] = ESTABLISHED
    z.sizes[me] += payload
    z.letter("d", is_orig)


def history(z: ZeekFlow) -> str:
    return ("^" if z.flipped else "") + "".join(z.history)
