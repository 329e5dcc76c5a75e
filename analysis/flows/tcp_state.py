"""The state the TCP sequence analysis keeps: per direction (Flow), per conversation (Conv),
the flagged packets kept for the pcap rules (Event) and what --packets shows (PacketResult).

Flags are a bitmask per packet; bit i is ``TCP_ANALYSIS_FLAGS[i]`` (records.py order).
``__slots__`` on Flow keeps the hot loop's attribute access cheap (tcp_analysis.py).

Keep in sync with: anomalies.md §3 (the per-direction state of Wireshark's packet-tcp.c),
translators.records.TCP_ANALYSIS_FLAGS (bit order) and AnalysisCounts,
analysis/flows/conn_summary.py (ZeekFlow).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analysis.flows import conn_summary as zeek
from translators.records import TCP_ANALYSIS_FLAGS, AnalysisCounts

M32 = 0xFFFFFFFF
FIN, SYN, RST, PSH, ACK = 0x01, 0x02, 0x04, 0x08, 0x10
SFR = SYN | FIN | RST
MAX_UNACKED = 10000
# Linux's smallest retransmission timeout (TCP_RTO_MIN): a retransmission of data last sent
# at least this long before is counted as after a timeout (the findings' "timeout" cause).
RTO_MIN_NS = 200_000_000
HALF = 0x80000000

(REUSED, RETRANS, FAST, SPURIOUS, OOO, LOST, ACKLOST, WUPDATE, WFULL, KA, KAACK, DUPACK, ZWP, ZW, ZWPACK) = (
    1 << i for i in range(len(TCP_ANALYSIS_FLAGS))
)
ANY_RETRANS = RETRANS | FAST | SPURIOUS
FLAG_BITS = tuple((name, 1 << i) for i, name in enumerate(TCP_ANALYSIS_FLAGS))
# Flags worth remembering per connection for the P-rules (and for `--packets`).
EVENT_MASK = ANY_RETRANS | OOO | LOST | ACKLOST | DUPACK | ZWP | ZW | REUSED | WFULL | KA
COMPLETE_SYN, COMPLETE_SYNACK, COMPLETE_ACK, COMPLETE_DATA, COMPLETE_FIN, COMPLETE_RST = 1, 2, 4, 8, 16, 32


def gt(a: int, b: int) -> bool:
    """a > b in sequence space (wrap-aware, like Wireshark's GT_SEQ)."""
    return 0 < ((a - b) & M32) < HALF


def flag_names(mask: int) -> list[str]:
    """Flag names in Wireshark's print order; retransmission is added for fast/spurious."""
    if mask & (FAST | SPURIOUS):
        mask |= RETRANS
    return [name for name, bit in FLAG_BITS if mask & bit]


class Flow:
    """One direction of a conversation (Wireshark's tcp_flow_t + tcp_analyze_seq_info)."""

    __slots__ = (
        "addr", "port", "base_seq", "base_set", "saw_syn", "nextseq", "nextseqtime", "nextseqframe", "maxseqtobeacked",
        "lastack", "lastacktime", "window", "win_scale", "is_first_ack", "dupacknum", "lastnondupack",
        "lastsegmentflags", "segs", "ordered", "lastacklen", "sack", "mss", "valid_bif",
        "packets", "bytes", "wire_bytes", "data_segments", "retrans_bytes", "rtt_min", "rtt_max", "rtt_sum", "rtt_n",
        "zw_since", "missed", "holes", "syns", "syn_first", "syn_last", "retrans_timeout",
    )  # fmt: skip

    def __init__(self, addr: int, port: int) -> None:
        self.addr = addr
        self.port = port
        self.base_seq = 0
        self.base_set = False
        self.saw_syn = False
        self.nextseq = 0  # 0 means unset, as in Wireshark
        self.nextseqtime = 0
        self.nextseqframe = 0
        self.maxseqtobeacked = 0
        self.lastack = 0
        self.lastacktime = 0
        self.window = M32  # Wireshark starts with G_MAXUINT32: "no window seen yet"
        self.win_scale = -1
        self.is_first_ack = False
        self.dupacknum = 0
        self.lastnondupack = 0
        self.lastsegmentflags = 0
        # unacked segments, oldest first: [seq, nextseq, frame, ts, karn]
        self.segs: list[list[int]] = []
        self.ordered = True  # segs is sorted by seq and nextseq, so an ACK retires a prefix
        self.lastacklen = 0
        self.sack: list[tuple[int, int]] = []
        self.mss = -1
        self.valid_bif = True
        self.packets = 0
        self.bytes = 0
        self.wire_bytes = 0
        self.data_segments = 0
        self.retrans_bytes = 0
        self.rtt_min = 0
        self.rtt_max = 0
        self.rtt_sum = 0
        self.rtt_n = 0
        self.zw_since = -1
        self.missed = 0  # bytes of gaps never filled (Zeek's missed_bytes), counted as each is settled
        # sequence ranges [start, end) skipped by "previous segment not captured" and not
        # filled yet: settled as a content gap only once the peer ACKs past them (Zeek)
        self.holes: list[list[int]] = []
        # for the findings (analysis/flows/findings.py): SYN or SYN-ACK packets sent and when,
        # retransmissions whose data was last sent >= RTO_MIN_NS before
        self.syns = 0
        self.syn_first = 0
        self.syn_last = 0
        self.retrans_timeout = 0


@dataclass(frozen=True)
class FirstReset:
    """The first RST of a conversation, for the reset finding: who, where, after how much data."""

    frame: int
    ts: int
    by_orig: bool
    states: tuple[int, int]  # Zeek endpoint states (orig, resp) just before it (conn_summary.py)
    bytes_orig: int
    bytes_resp: int


@dataclass
class Event:
    """A flagged packet kept for the pcap rules (P1-P6) and for reports."""

    frame: int
    ts: int
    orig: bool
    flags: int
    seq: int
    ack: int
    dupnum: int = 0


@dataclass
class Conv:
    """A TCP conversation (tcp.stream)."""

    stream: int
    flow1: Flow
    flow2: Flow
    ip_ver: int
    first_ts: int
    last_ts: int = 0
    orig: Flow | None = None  # the originator, set by TcpAnalyzer._direction on the first packet
    guessed: bool = False
    completeness: int = 0
    ts_mru_syn: int = 0
    first_rtt: int = 0  # handshake RTT for reports: > 0 once measured (a 0 or negative delta counts as 1 ns)
    # Wireshark's own tcpd->ts_first_rtt, which times out-of-order segments: signed (an ACK
    # stamped before its SYN gives a negative one, used as a huge unsigned threshold), and
    # 0 stays "not measured" until an ACK comes at another instant than the SYN
    irtt_ns: int = 0
    counts: list[int] = field(default_factory=lambda: [0] * len(TCP_ANALYSIS_FLAGS))
    events: list[Event] = field(default_factory=list)
    zw_stalls: list[tuple[int, int, bool]] = field(default_factory=list)  # (start, end or -1, receiver is orig)
    z: zeek.ZeekFlow = field(default_factory=zeek.ZeekFlow)
    icmp_error: str | None = None
    icmp_errors: int = 0
    first_reset: FirstReset | None = None
    resets: int = 0


@dataclass
class PacketResult:
    """What --packets shows for one TCP segment."""

    conv: Conv
    is_orig: bool
    flags: int
    rel_seq: int
    rel_ack: int
    window_scaled: int | None
    dupnum: int = 0
    dupframe: int = 0
    ack_rtt_ns: int | None = None
    bytes_in_flight: int | None = None


def counts_of(conv: Conv) -> AnalysisCounts:
    return AnalysisCounts(**{name: conv.counts[i] for i, name in enumerate(TCP_ANALYSIS_FLAGS)})


def scaled_window(fwd: Flow, win: int, flags: int) -> int:
    if flags & SYN or fwd.win_scale < 0:
        return win
    return win << fwd.win_scale
