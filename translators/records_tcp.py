"""TCP provider records: state changes, folded lifecycles, retransmits, resets, congestion states, the connection summary, SIFTR samples and tcp debug snapshots.

Everything a TCP control block tells about one connection over its life, from the
kernel (tracepoints) or from a capture's analysis (the Connection summary with
Wireshark's tcp.analysis counts and Zeek's conn_state and history).

Keep in sync with: ``../shared/docs/providers.md`` §4-6 and §8 (tcp, tcpdebug, siftr,
the Linux-only events), translators/tcp.py, translators/siftr.py, translators/tcpdebug.py,
translators/siftr_log.py, docs/records/ (python -m translators.docgen).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from translators.records_envelope import FlowRecord, Record
from translators.records_fields import (
    CA_STATES,
    DEBUG_DIRECTIONS,
    PRU_REQUESTS,
    SEVERITIES,
    TCP_STATES,
    TRANSPORTS,
    ZEEK_CONN_STATES,
    Bool,
    Float,
    Int,
    Str,
    doc,
)


class TcpStateChange(FlowRecord, tag="tcp_state", kw_only=True):
    """tcp:::state-change (and connect-*/accept-* derived probes) from inet_sock_set_state."""

    prev_state: Annotated[str, doc("state before the change (FreeBSD name)", choices=TCP_STATES, brief=True)]
    state: Annotated[str, doc("new state (FreeBSD name)", choices=TCP_STATES, brief=True)]
    linux_prev_state: Annotated[Int, doc("previous Linux enum tcp_state value")] = None
    linux_state: Annotated[Int, doc("new Linux enum tcp_state value")] = None
    inferred: Annotated[bool, doc("synthesized by nettrail, not reported by the kernel (TIME_WAIT)")] = False
    timewait_state: Annotated[
        Str,
        doc(
            "on an X -> CLOSED of a full socket handed to a timewait mini-socket that waits for the peer's FIN (an orphan whose FIN was acked): FIN_WAIT_2, as ss shows it; it moves to TIME_WAIT, unseen, when that FIN comes. The port stays held either way",
            choices=("FIN_WAIT_2",),
        ),
    ] = None
    active: Annotated[Bool, doc("the connection was actively opened by this host")] = None
    caused_by: Annotated[
        Str, doc("who caused the transition: local process or remote peer", choices=("local", "peer"))
    ] = None


class TcpRetransmit(FlowRecord, tag="tcp_retransmit", kw_only=True):
    """tcp:::retransmit (tcp_retransmit_skb) and retransmit-synack."""

    state: Annotated[Str, doc("connection state at the retransmission", choices=TCP_STATES, brief=True)] = None
    tcp_seq: Annotated[Int, doc("first sequence number retransmitted", brief=True)] = None
    tcp_seq_end: Annotated[Int, doc("sequence number after the retransmitted data")] = None
    tcp_payload_len: Annotated[Int, doc("retransmitted payload", unit="bytes")] = None
    tcp_flags: Annotated[Int, doc("flags of the retransmitted segment", hexa=True)] = None
    err: Annotated[Int, doc("result of the transmit (0 ok, negative errno)")] = None
    ca_state: Annotated[Str, doc("congestion state at the time", choices=CA_STATES, brief=True)] = None
    retrans_kind: Annotated[
        Str,
        doc(
            "timeout (RTO), fast, syn, synack, tlp or unknown",
            choices=("rto", "fast", "syn", "synack", "tlp", "unknown"),
        ),
    ] = None
    segs: Annotated[Int, doc("segments retransmitted (tcp_skb_pcount: what the kernel's TcpRetransSegs counts)")] = None


class TcpReset(FlowRecord, tag="tcp_reset", kw_only=True):
    """tcp:::reset-sent (tcp_send_reset) / reset-received (tcp_receive_reset)."""

    state: Annotated[
        Str, doc("state of the socket when the RST was sent or received", choices=TCP_STATES, brief=True)
    ] = None
    sender: Annotated[str, doc("who sent the RST: local host or remote peer", choices=("local", "peer"), brief=True)]
    reason: Annotated[Str, doc("kernel RST reason (enum sk_rst_reason name)", brief=True)] = None
    active: Annotated[Bool, doc("local active reset (no provoking segment), e.g. SO_LINGER 0")] = None


class TcpCongState(FlowRecord, tag="tcp_cong_state", kw_only=True):
    """tcp-cong-state (tcp_cong_state_set): Open/Disorder/CWR/Recovery/Loss."""

    prev_ca_state: Annotated[Str, doc("congestion state before", choices=CA_STATES, brief=True)] = None
    ca_state: Annotated[str, doc("congestion state after", choices=CA_STATES, brief=True)]
    snd_cwnd: Annotated[Int, doc("congestion window", unit="bytes")] = None
    snd_ssthresh: Annotated[Int, doc("slow-start threshold", unit="bytes")] = None


class TcpLifecycle(FlowRecord, tag="tcp_lifecycle", kw_only=True):
    """tcp --tcp-fold: one socket's state changes, congestion-state changes and final counters,
    folded in the kernel (socket storage) into one record per socket end, at tcp_destroy_sock
    or, for a socket older than the fold window, flushed by siftr-poll (partial; the socket's
    later changes are records of their own). expand() (translators/tcp_lifecycle.py) gives the
    tcp_state, tcp_cong_state, connection and flow_counters records the socket streams without it."""

    partial: Annotated[
        bool,
        doc(
            "flushed while the socket lives (older than --fold-window, or more changes than the fold holds): what follows are records of their own",
            brief=True,
        ),
    ] = False
    state: Annotated[
        Str,
        doc(
            "the socket's state at the record (at its end: the state it was destroyed in)",
            choices=TCP_STATES,
            brief=True,
        ),
    ] = None
    state_path: Annotated[
        str,
        doc(
            "the states entered, in order, from prev_state (FreeBSD names, as reported by the kernel: no inferred TIME_WAIT)",
            brief=True,
        ),
    ] = ""
    prev_state: Annotated[Str, doc("state before the first change folded (FreeBSD name)", choices=TCP_STATES)] = None
    linux_prev_state: Annotated[Int, doc("Linux enum tcp_state before the first change folded")] = None
    linux_states: Annotated[list[int], doc("Linux enum tcp_state entered at each change, in order")] = msgspec.field(
        default_factory=list
    )
    state_us: Annotated[list[int], doc("each change's time after born_ns (floored to the microsecond)", unit="us")] = (
        msgspec.field(default_factory=list)
    )
    state_ctx: Annotated[list[str], doc("each change's execution context: task or softirq")] = msgspec.field(
        default_factory=list
    )
    state_error: Annotated[list[bool], doc("sk_err was set at the change (an X -> CLOSE that is not a TIME_WAIT)")] = (
        msgspec.field(default_factory=list)
    )
    state_peer_closed: Annotated[
        list[bool] | None,
        doc(
            "the peer's FIN had come at the change (an X -> CLOSE into TIME_WAIT; without it a FIN_WAIT_2 timewait socket, as ss shows it); null: not recorded (before issue 34)"
        ),
    ] = None
    time_wait: Annotated[
        Bool,
        doc(
            "its last change put the socket in TIME_WAIT (expand() gives X -> TIME_WAIT, inferred, then TIME_WAIT -> CLOSED): what the Overview's TIME_WAIT counts look for"
        ),
    ] = None
    born_ns: Annotated[Int, doc("kernel time of the first change folded (CLOCK_MONOTONIC)", unit="ns")] = None
    congestion_changes: Annotated[int, doc("congestion-state changes folded")] = 0
    first_ca_state: Annotated[Str, doc("congestion state before the first change", choices=CA_STATES)] = None
    prev_ca_state: Annotated[Str, doc("congestion state before the last change", choices=CA_STATES)] = None
    ca_state: Annotated[Str, doc("congestion state after the last change", choices=CA_STATES)] = None
    congestion_us: Annotated[Int, doc("the last congestion change's time after born_ns", unit="us")] = None
    congestion_ctx: Annotated[
        Str, doc("the last congestion change's execution context", choices=("task", "softirq", "unknown"))
    ] = None
    congestion_after: Annotated[Int, doc("state changes before the last congestion change (its place in the path)")] = (
        None
    )
    snd_cwnd: Annotated[Int, doc("congestion window at the last congestion change", unit="bytes")] = None
    snd_ssthresh: Annotated[Int, doc("slow-start threshold at the last congestion change", unit="bytes")] = None
    start: Annotated[Float, doc("the socket's first sighting, seconds since the epoch", unit="s", fmt="%.6f")] = None
    lifetime_ns: Annotated[Int, doc("first sighting to this record", unit="ns")] = None
    bytes_acked: Annotated[Int, doc("bytes acknowledged by the peer (tcp_sock.bytes_acked)", unit="bytes")] = None
    bytes_received: Annotated[Int, doc("bytes received in order (tcp_sock.bytes_received)", unit="bytes")] = None
    segs_in: Annotated[Int, doc("segments received (tcp_sock.segs_in)")] = None
    segs_out: Annotated[Int, doc("segments sent (tcp_sock.segs_out)")] = None
    total_retrans: Annotated[Int, doc("segments retransmitted over the life (tcp_sock.total_retrans)")] = None
    bytes_sent: Annotated[
        Int,
        doc(
            "siftr: payload bytes sent, retransmissions included (null: siftr did not follow the socket)", unit="bytes"
        ),
    ] = None
    flow_samples: Annotated[Int, doc("siftr: sample records emitted for the socket")] = None
    flow_skbs: Annotated[Int, doc("siftr: buffers (or, siftr-poll alone, segments) the samples stand for")] = None
    retransmits: Annotated[
        int, doc("retransmissions while folded (tcp_retransmit_skb; each is also a tcp_retransmit record)")
    ] = 0
    first_retransmit_us: Annotated[Int, doc("the first retransmission's time after born_ns", unit="us")] = None
    last_retransmit_us: Annotated[Int, doc("the last retransmission's time after born_ns", unit="us")] = None
    resets: Annotated[int, doc("resets sent or received while folded (each is also a tcp_reset record)")] = 0
    reset_sender: Annotated[
        Str, doc("who sent the last reset: local (this socket) or peer", choices=("local", "peer"))
    ] = None
    reset_state: Annotated[Str, doc("the socket's state at the last reset (FreeBSD name)", choices=TCP_STATES)] = None
    reset_us: Annotated[Int, doc("the last reset's time after born_ns", unit="us")] = None
    conn_state: Annotated[
        Str,
        doc(
            "Zeek conn_state of the socket's connection, from the events the collector saw (at its end; as the connection record's)",
            choices=ZEEK_CONN_STATES,
        ),
    ] = None
    history: Annotated[
        Str, doc("Zeek history letters (upper case: originator; at its end, as the connection record's)")
    ] = None
    direction_guessed: Annotated[
        Bool, doc("the opening was not seen (a socket opened before tracing began): the originator is guessed")
    ] = None


class AnalysisCounts(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """Per-connection packet counts matching tshark's `tcp.analysis.<flag>` filters."""

    reused_ports: Annotated[int, doc("packets tshark flags tcp.analysis.reused_ports")] = 0
    retransmission: Annotated[int, doc("packets tshark flags tcp.analysis.retransmission")] = 0
    fast_retransmission: Annotated[int, doc("packets tshark flags tcp.analysis.fast_retransmission")] = 0
    spurious_retransmission: Annotated[int, doc("packets tshark flags tcp.analysis.spurious_retransmission")] = 0
    out_of_order: Annotated[int, doc("packets tshark flags tcp.analysis.out_of_order")] = 0
    lost_segment: Annotated[int, doc("packets tshark flags tcp.analysis.lost_segment")] = 0
    ack_lost_segment: Annotated[int, doc("packets tshark flags tcp.analysis.ack_lost_segment")] = 0
    window_update: Annotated[int, doc("packets tshark flags tcp.analysis.window_update")] = 0
    window_full: Annotated[int, doc("packets tshark flags tcp.analysis.window_full")] = 0
    keep_alive: Annotated[int, doc("packets tshark flags tcp.analysis.keep_alive")] = 0
    keep_alive_ack: Annotated[int, doc("packets tshark flags tcp.analysis.keep_alive_ack")] = 0
    duplicate_ack: Annotated[int, doc("packets tshark flags tcp.analysis.duplicate_ack")] = 0
    zero_window_probe: Annotated[int, doc("packets tshark flags tcp.analysis.zero_window_probe")] = 0
    zero_window: Annotated[int, doc("packets tshark flags tcp.analysis.zero_window")] = 0
    zero_window_probe_ack: Annotated[int, doc("packets tshark flags tcp.analysis.zero_window_probe_ack")] = 0


# What a connection's findings can say (analysis/flows/findings.py decides; docs/analyze.md
# "Findings" gives each kind's rule).
FINDING_KINDS = (
    "refused", "no_answer", "handshake_incomplete", "syn_retries", "reset", "zero_window", "retransmissions",
    "half_open", "one_sided", "capture_incomplete", "icmp_unreachable", "out_of_order", "reused_port",
)  # fmt: skip
FINDING_SIDES = ("orig", "resp")


class Finding(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One problem of a connection in plain words, with its severity and the numbers behind it
    (Wireshark's Expert Info, per connection and explained)."""

    kind: Annotated[str, doc("what was found", choices=FINDING_KINDS, brief=True)]
    severity: Annotated[str, doc("info, notice, warning or critical (anomalies.md §1)", choices=SEVERITIES, brief=True)]
    message: Annotated[str, doc("the finding in plain words", brief=True)]
    side: Annotated[
        Str, doc("the side concerned: who reset, stalled, retransmitted or was silent", choices=FINDING_SIDES)
    ] = None
    count: Annotated[Int, doc("how many: packets, episodes, retransmissions, SYNs or segments, by kind")] = None
    seconds: Annotated[Float, doc("time concerned: stalled time, time spent retrying a SYN", unit="s")] = None
    ratio: Annotated[
        Float, doc("share: of the connection's life (zero window) or of the side's data segments (retransmissions)")
    ] = None
    data_bytes: Annotated[
        Int, doc("payload bytes concerned: exchanged before a reset, missing from the capture", unit="bytes")
    ] = None
    state: Annotated[
        Str,
        doc(
            "where the connection was when it happened (resets)",
            choices=("handshake", "established", "closing", "closed"),
        ),
    ] = None
    fast: Annotated[Int, doc("retransmissions after duplicate ACKs or SACKs (tcp.analysis.fast_retransmission)")] = None
    timeout: Annotated[
        Int, doc("retransmissions after a timeout (RTO): the same data was last sent >= 200 ms before")
    ] = None
    spurious: Annotated[
        Int, doc("retransmissions of data the receiver had acknowledged (tcp.analysis.spurious_retransmission)")
    ] = None
    frame: Annotated[Int, doc("first frame showing it")] = None
    ts: Annotated[Float, doc("time of that frame, seconds since the epoch", unit="s")] = None


class Connection(Record, tag="connection", kw_only=True):
    """Connection summary (Zeek-like for captures; final counters at tcp_destroy_sock live)."""

    proto: Annotated[
        str,
        doc(
            "transport protocol: tcp, udp, udplite, icmp, icmp6, or the IP protocol of another transport (gre, sctp, ip-N)",
            choices=TRANSPORTS,
            key=True,
            brief=True,
        ),
    ]
    ip_ver: Annotated[Int, doc("IP version, 4 or 6")] = None
    src: Annotated[Str, doc("originator address (local side for live data)", key=True, brief=True, index=True)] = None
    sport: Annotated[Int, doc("originator port", key=True, brief=True, index=True)] = None
    dst: Annotated[Str, doc("responder address", key=True, brief=True, index=True)] = None
    dport: Annotated[Int, doc("responder port", key=True, brief=True, index=True)] = None
    source: Annotated[str, doc("wire (from packets) or kernel (from tracepoints)", choices=("wire", "kernel"))] = "wire"
    start: Annotated[Float, doc("first packet or creation time, seconds since the epoch", unit="s", fmt="%.6f")] = None
    end: Annotated[Float, doc("last packet or destruction time, seconds since the epoch", unit="s", fmt="%.6f")] = None
    duration: Annotated[Float, doc("end - start", unit="s", fmt="%.6f", brief=True)] = None
    packets_orig: Annotated[Int, doc("packets from the originator", brief=True)] = None
    packets_resp: Annotated[Int, doc("packets from the responder", brief=True)] = None
    bytes_orig: Annotated[Int, doc("payload bytes from the originator", unit="bytes", brief=True)] = None
    bytes_resp: Annotated[Int, doc("payload bytes from the responder", unit="bytes", brief=True)] = None
    wire_bytes_orig: Annotated[Int, doc("IP bytes from the originator", unit="bytes")] = None
    wire_bytes_resp: Annotated[Int, doc("IP bytes from the responder", unit="bytes")] = None
    conn_state: Annotated[Str, doc("Zeek conn_state", choices=ZEEK_CONN_STATES, brief=True)] = None
    history: Annotated[Str, doc("Zeek history letters (upper case: originator)", brief=True)] = None
    direction_guessed: Annotated[
        Bool,
        doc(
            "the opening was not seen (no SYN in a capture; a live socket opened before tracing began): the originator is guessed"
        ),
    ] = None
    stream: Annotated[Int, doc("connection index in the capture (like tcp.stream / udp.stream)")] = None
    state: Annotated[Str, doc("last TCP state (live)", choices=TCP_STATES)] = None
    handshake_rtt_us: Annotated[Int, doc("SYN to the handshake's final ACK (iRTT)", unit="us")] = None
    rtt_orig_min_us: Annotated[Int, doc("minimum ACK RTT of originator data", unit="us")] = None
    rtt_orig_mean_us: Annotated[Int, doc("mean ACK RTT of originator data", unit="us")] = None
    rtt_orig_max_us: Annotated[Int, doc("maximum ACK RTT of originator data", unit="us")] = None
    rtt_resp_min_us: Annotated[Int, doc("minimum ACK RTT of responder data", unit="us")] = None
    rtt_resp_mean_us: Annotated[Int, doc("mean ACK RTT of responder data", unit="us")] = None
    rtt_resp_max_us: Annotated[Int, doc("maximum ACK RTT of responder data", unit="us")] = None
    retrans_bytes: Annotated[Int, doc("payload bytes retransmitted (both directions)", unit="bytes")] = None
    missed_bytes: Annotated[Int, doc("bytes known missing from gaps", unit="bytes")] = None
    completeness: Annotated[
        Int, doc("Wireshark conversation completeness: SYN 1, SYN-ACK 2, ACK 4, DATA 8, FIN 16, RST 32")
    ] = None
    bytes_acked: Annotated[Int, doc("bytes acknowledged by the peer (tcp_sock.bytes_acked)", unit="bytes")] = None
    bytes_received: Annotated[Int, doc("bytes received in order (tcp_sock.bytes_received)", unit="bytes")] = None
    segs_in: Annotated[Int, doc("segments received (tcp_sock.segs_in)")] = None
    segs_out: Annotated[Int, doc("segments sent (tcp_sock.segs_out)")] = None
    total_retrans: Annotated[Int, doc("segments retransmitted over the life (tcp_sock.total_retrans)")] = None
    lifetime_ns: Annotated[Int, doc("socket lifetime from first sighting to destruction", unit="ns")] = None
    analysis: Annotated[AnalysisCounts | None, doc("packets per tcp.analysis flag (tshark filter counts)")] = None
    icmp_error: Annotated[
        Str, doc("last ICMP destination-unreachable error quoting this flow, e.g. port-unreachable")
    ] = None
    icmp_errors: Annotated[Int, doc("ICMP destination-unreachable messages quoting this flow")] = None
    findings: Annotated[
        list[Finding] | None, doc("what went wrong, worst first (captures; docs/analyze.md Findings)", brief=True)
    ] = None


# --- siftr and tcp debug ---------------------------------------------------------------


class SiftrSample(FlowRecord, tag="siftr_sample", kw_only=True):
    """tcp:::siftr: a snapshot of the control block at one packet (providers.md 6.2), or at
    a poll (siftr-poll: direction "poll", no packet)."""

    direction: Annotated[
        str,
        doc(
            "packet direction: in or out; poll: siftr-poll's periodic sample, no packet",
            choices=("in", "out", "poll"),
            brief=True,
        ),
    ]
    snd_cwnd: Annotated[Int, doc("congestion window", unit="bytes", brief=True)] = None
    snd_ssthresh: Annotated[Int, doc("slow-start threshold", unit="bytes")] = None
    snd_wnd: Annotated[Int, doc("send window (scaled)", unit="bytes")] = None
    rcv_wnd: Annotated[Int, doc("receive window (scaled)", unit="bytes")] = None
    t_flags: Annotated[Int, doc("FreeBSD t_flags, synthesized subset (providers.md 6.3)", hexa=True)] = None
    t_flags2: Annotated[Int, doc("FreeBSD t_flags2, synthesized subset", hexa=True)] = None
    conn_state: Annotated[Int, doc("TCP state, FreeBSD numbering")] = None
    mss: Annotated[Int, doc("maximum segment size (mss_cache)", unit="bytes")] = None
    srtt: Annotated[Int, doc("smoothed RTT", unit="us", brief=True)] = None
    rttvar: Annotated[Int, doc("RTT variance (mdev)", unit="us")] = None
    rto: Annotated[Int, doc("retransmission timeout", unit="us")] = None
    sack_enabled: Annotated[Bool, doc("SACK negotiated")] = None
    snd_scale: Annotated[Int, doc("send window scale shift")] = None
    rcv_scale: Annotated[Int, doc("receive window scale shift")] = None
    snd_buf_hiwater: Annotated[Int, doc("send buffer limit (sk_sndbuf)", unit="bytes")] = None
    snd_buf_cc: Annotated[Int, doc("bytes in the send buffer (write_seq - snd_una)", unit="bytes")] = None
    rcv_buf_hiwater: Annotated[Int, doc("receive buffer limit (sk_rcvbuf)", unit="bytes")] = None
    rcv_buf_cc: Annotated[Int, doc("in-order bytes waiting to be read (rcv_nxt - copied_seq)", unit="bytes")] = None
    sent_inflight_bytes: Annotated[Int, doc("snd_nxt - snd_una", unit="bytes", brief=True)] = None
    t_segqlen: Annotated[Int, doc("segments in the reassembly queue (not counted by Linux)")] = None
    flowid: Annotated[Int, doc("flow hash")] = None
    flowtype: Annotated[Int, doc("M_HASHTYPE of flowid (0 none)")] = None
    snd_una: Annotated[Int, doc("oldest unacknowledged sequence number")] = None
    snd_nxt: Annotated[Int, doc("next sequence number to send")] = None
    packets_out: Annotated[Int, doc("segments in flight (packets_out)")] = None
    sacked_out: Annotated[Int, doc("SACKed segments")] = None
    lost_out: Annotated[Int, doc("segments marked lost")] = None
    retrans_out: Annotated[Int, doc("retransmitted segments in flight")] = None
    th_seq: Annotated[Int, doc("sequence number of the triggering packet (none for a poll)")] = None
    th_ack: Annotated[Int, doc("acknowledgment number of the triggering packet (none for a poll)")] = None
    data_sz: Annotated[Int, doc("payload of the triggering packet (none for a poll)", unit="bytes")] = None
    ca_state: Annotated[Str, doc("congestion state", choices=CA_STATES)] = None
    cc_algo: Annotated[Str, doc("congestion control algorithm")] = None


class TcpDebugSnapshot(FlowRecord, tag="tcpdebug_snapshot", kw_only=True):
    """tcp:::debug-input/output/user/drop: a full control-block snapshot (providers.md 5)."""

    direction: Annotated[
        str, doc("TA_* point: input, output, user, respond or drop", choices=DEBUG_DIRECTIONS, brief=True)
    ]
    prureq: Annotated[Int, doc("PRU_* user request code (debug-user only)")] = None
    prureq_str: Annotated[Str, doc("PRU_* user request name", choices=PRU_REQUESTS, brief=True)] = None
    state: Annotated[Str, doc("TCP state", choices=TCP_STATES, brief=True)] = None
    snd_una: Annotated[Int, doc("oldest unacknowledged sequence number")] = None
    snd_nxt: Annotated[Int, doc("next sequence number to send")] = None
    rcv_nxt: Annotated[Int, doc("next sequence number expected")] = None
    rcv_wup: Annotated[Int, doc("rcv_nxt at the last window update sent")] = None
    snd_wl1: Annotated[Int, doc("sequence number of the last window update")] = None
    snd_wnd: Annotated[Int, doc("send window", unit="bytes")] = None
    rcv_wnd: Annotated[Int, doc("receive window", unit="bytes")] = None
    snd_cwnd: Annotated[Int, doc("congestion window", unit="bytes", brief=True)] = None
    snd_ssthresh: Annotated[Int, doc("slow-start threshold", unit="bytes")] = None
    srtt_us: Annotated[Int, doc("smoothed RTT", unit="us", brief=True)] = None
    rttvar_us: Annotated[Int, doc("RTT variance", unit="us")] = None
    rto_ms: Annotated[Int, doc("retransmission timeout", unit="ms")] = None
    mss: Annotated[Int, doc("maximum segment size", unit="bytes")] = None
    snd_ws: Annotated[Int, doc("send window scale")] = None
    rcv_ws: Annotated[Int, doc("receive window scale")] = None
    ts_recent: Annotated[Int, doc("last timestamp to echo")] = None
    ca_state: Annotated[Str, doc("congestion state", choices=CA_STATES)] = None
    retransmits: Annotated[Int, doc("consecutive RTO retransmissions (icsk_retransmits)")] = None
    backoff: Annotated[Int, doc("RTO backoff exponent (icsk_backoff)")] = None
    total_retrans: Annotated[Int, doc("segments retransmitted over the life")] = None
    delivered: Annotated[Int, doc("segments delivered (tcp_sock.delivered)")] = None
    app_limited: Annotated[Int, doc("app-limited marker (tcp_sock.app_limited)")] = None
    packets_out: Annotated[Int, doc("segments in flight")] = None
    sacked_out: Annotated[Int, doc("SACKed segments")] = None
    lost_out: Annotated[Int, doc("segments marked lost")] = None
    retrans_out: Annotated[Int, doc("retransmitted segments in flight")] = None
    tcp_seq: Annotated[Int, doc("segment sequence number (input/output/drop)")] = None
    tcp_ack: Annotated[Int, doc("segment acknowledgment number")] = None
    tcp_flags: Annotated[Int, doc("segment flags", hexa=True)] = None
    tcp_window: Annotated[Int, doc("segment raw window")] = None
    tcp_payload_len: Annotated[
        Int, doc("segment payload; debug-user SEND/RCVD: the bytes the call moved (0 on an error)", unit="bytes")
    ] = None
    drop_reason: Annotated[Str, doc("kernel drop reason (debug-drop)")] = None
