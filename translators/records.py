"""Stable record schemas: the one definition of every record nettrail produces.

Every record type is a ``msgspec.Struct``. Each field carries its own documentation
(meaning, unit, presentation hints) in an ``Annotated`` ``msgspec.Meta``; the xo
formatter, the Django models, the ingest decoder, the websocket payloads and
``docs/records/`` all read these definitions through :func:`describe`. Nothing
else lists record fields.

Keep in sync with: ``docs/providers`` semantics (``../shared/docs/providers.md``);
raw kernel events reach these records only through the translators.
Schema changes: bump nothing silently, add a fix-up to ``UPGRADES`` instead.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import types
import typing
import uuid
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

import msgspec

SCHEMA = "netprov/2"  # 2: collector_status.degraded (UPGRADES has the fix-up from 1)

# --- vocabularies -------------------------------------------------------------

PROVIDERS = ("ip", "udp", "udplite", "tcp", "tcpdebug", "siftr", "skb", "linux", "nettrail")

# FreeBSD state names and numbers (providers.md 4.4); the stable numbering.
TCP_STATES = (
    "CLOSED",
    "LISTEN",
    "SYN_SENT",
    "SYN_RECEIVED",
    "ESTABLISHED",
    "CLOSE_WAIT",
    "FIN_WAIT_1",
    "CLOSING",
    "LAST_ACK",
    "FIN_WAIT_2",
    "TIME_WAIT",
)
# Linux `enum tcp_state` value -> FreeBSD name (NEW_SYN_RECV is a request socket).
LINUX_TCP_STATES = {
    1: "ESTABLISHED",
    2: "SYN_SENT",
    3: "SYN_RECEIVED",
    4: "FIN_WAIT_1",
    5: "FIN_WAIT_2",
    6: "TIME_WAIT",
    7: "CLOSED",
    8: "CLOSE_WAIT",
    9: "LAST_ACK",
    10: "LISTEN",
    11: "CLOSING",
    12: "SYN_RECEIVED",
    13: "CLOSED",
}
CA_STATES = ("Open", "Disorder", "CWR", "Recovery", "Loss")
# FreeBSD TA_* codes for tcp debug points (providers.md 5).
DEBUG_DIRECTIONS = ("input", "output", "user", "respond", "drop")
PRU_REQUESTS = (
    "ATTACH", "DETACH", "BIND", "LISTEN", "CONNECT", "ACCEPT", "DISCONNECT", "SHUTDOWN",
    "RCVD", "SEND", "ABORT", "CONTROL", "SENSE", "RCVOOB", "SENDOOB", "SOCKADDR",
    "PEERADDR", "CONNECT2", "FASTTIMO", "SLOWTIMO", "PROTORCV", "PROTOSEND", "SEND_EOF",
    "SOSETLABEL", "CLOSE", "FLUSH",
)  # fmt: skip
TCP_FLAG_NAMES = ("FIN", "SYN", "RST", "PUSH", "ACK", "URG", "ECE", "CWR")
# Wireshark tcp.analysis.* flags, in the order Wireshark prints them.
TCP_ANALYSIS_FLAGS = (
    "reused_ports",
    "retransmission",
    "fast_retransmission",
    "spurious_retransmission",
    "out_of_order",
    "lost_segment",
    "ack_lost_segment",
    "window_update",
    "window_full",
    "keep_alive",
    "keep_alive_ack",
    "duplicate_ack",
    "zero_window_probe",
    "zero_window",
    "zero_window_probe_ack",
)
ZEEK_CONN_STATES = (
    "S0", "S1", "SF", "REJ", "S2", "S3", "RSTO", "RSTR", "RSTOS0", "RSTRH", "SH", "SHR", "OTH",
)  # fmt: skip
SEVERITIES = ("info", "notice", "warning", "critical")


def tcp_flags_str(flags: int) -> str:
    """All set flags, in bit order: 0x12 -> 'SYN|ACK' (FreeBSD's tcp.d returned only one)."""
    return "|".join(name for bit, name in enumerate(TCP_FLAG_NAMES) if flags & (1 << bit))


# --- field documentation -------------------------------------------------------


def doc(
    text: str,
    *,
    unit: str | None = None,
    fmt: str | None = None,
    key: bool = False,
    brief: bool = False,
    choices: tuple[str, ...] | None = None,
    hexa: bool = False,
    index: bool = False,
) -> msgspec.Meta:
    """Describe a field once: meaning, unit and how it is shown.

    brief: shown in the one-line text/HTML view (all fields go to JSON/XML).
    key: identifies the instance (xo key field, leads the line).
    fmt: printf-style display format for text/HTML (encoding styles drop the width).
    choices: the only string values allowed. hexa: show as hex for humans.
    index: the dashboard queries by this field (the Django model indexes it).
    """
    extra: dict[str, Any] = {}
    for name, value in (("unit", unit), ("fmt", fmt), ("choices", choices)):
        if value is not None:
            extra[name] = value
    for name, flag in (("key", key), ("brief", brief), ("hexa", hexa), ("index", index)):
        if flag:
            extra[name] = True
    return msgspec.Meta(description=text, extra=extra)


Str = str | None
Int = int | None
Float = float | None
Bool = bool | None
Blob = bytes | None  # a module alias: UdpDatagram has a field named `bytes`


# --- the envelope ----------------------------------------------------------------


class Record(msgspec.Struct, kw_only=True, tag_field="kind", forbid_unknown_fields=True, gc=False):
    """Envelope present on every record (providers.md 0.1).

    gc=False: records are plain data that never reference themselves (no cycles), so
    the cycle collector need not track them; it cut a third off decoding a batch.
    """

    schema: Annotated[str, doc("schema id of this record")] = SCHEMA
    host_id: Annotated[str, doc("host that produced the record (collector host name or capture name)", index=True)]
    boot_id: Annotated[str, doc("boot id of the host (/proc/sys/kernel/random/boot_id) or capture id")]
    seq: Annotated[int, doc("collector sequence number, per (host, boot); gaps mean lost records")]
    ts_ns: Annotated[int, doc("kernel timestamp: CLOCK_MONOTONIC for live data, capture time since the epoch for files", unit="ns")]
    ts_wall: Annotated[float, doc("wall-clock time, seconds since the epoch", unit="s", fmt="%.6f", brief=True)]
    provider: Annotated[str, doc("provider that produced it", choices=PROVIDERS, brief=True)]
    probe: Annotated[str, doc("probe name (FreeBSD spelling with dashes, or the Linux-only name)", brief=True)]
    hook: Annotated[Str, doc("the Linux hook or capture source that produced it, e.g. tp_btf/tcp_probe")] = None
    cpu: Annotated[Int, doc("CPU the event fired on")] = None
    netns: Annotated[Int, doc("network namespace inode")] = None
    ctx: Annotated[Str, doc("execution context: task (attribution valid), softirq or unknown", choices=("task", "softirq", "unknown"))] = None
    conn_uuid: Annotated[Str, doc("persistent connection identity: UUID from (host, boot, socket cookie)", index=True)] = None
    sock_cookie: Annotated[Int, doc("kernel socket cookie (SO_COOKIE)")] = None
    skb_uid: Annotated[Int, doc("buffer lifecycle id (identity of one sk_buff lifetime)", index=True)] = None
    skb_gen: Annotated[Int, doc("generation of the buffer address, keeps reused addresses apart")] = None
    pid: Annotated[Int, doc("process id (thread id) of the owner", brief=True)] = None
    tgid: Annotated[Int, doc("thread-group id (the process) of the owner")] = None
    comm: Annotated[Str, doc("command name of the owner", brief=True, index=True)] = None
    uid: Annotated[Int, doc("user id of the owner")] = None
    gid: Annotated[Int, doc("group id of the owner")] = None
    cgroup_id: Annotated[Int, doc("cgroup v2 id of the owner")] = None
    attribution: Annotated[Str, doc("where pid/comm came from: current task or the socket-owner map", choices=("current", "owner-map"))] = None
    approx: Annotated[list[str], doc("names of fields that are derived or approximate on Linux")] = msgspec.field(default_factory=list)

    @property
    def kind(self) -> str:
        return typing.cast(str, type(self).__struct_config__.tag)

    def __post_init__(self) -> None:
        cls = type(self)
        plan = _PLANS.get(cls) or _plan(cls)
        if not _DECODING.active:
            # Records built in Python: one C call fetches every value, then one set
            # lookup per field; the slow loop only runs to name a failure.
            for value, allowed in zip(msgspec.structs.astuple(self), plan.types, strict=True):
                if type(value) not in allowed:
                    _raise_type_error(self, plan)
        # Decoders (decode_batch, from_json, from_msgpack) already checked the types:
        # only the vocabularies remain, which msgspec cannot see in a plain `str`.
        for name, choices in plan.choices:
            value = getattr(self, name)
            if value is not None and value not in choices:
                raise ValueError(f"{self.kind}.{name}: {value!r:.60} is not one of {', '.join(choices)}")


class FlowRecord(Record, kw_only=True):
    """The 4-tuple, local side first for socket events, source first for packets."""

    ip_ver: Annotated[Int, doc("IP version, 4 or 6")] = None
    src: Annotated[Str, doc("source (or local) address", key=True, brief=True, index=True)] = None
    sport: Annotated[Int, doc("source (or local) port", key=True, brief=True, index=True)] = None
    dst: Annotated[Str, doc("destination (or remote) address", key=True, brief=True, index=True)] = None
    dport: Annotated[Int, doc("destination (or remote) port", key=True, brief=True, index=True)] = None


# --- ip, udp, tcp packets ----------------------------------------------------------


class IpPacket(FlowRecord, tag="ip_packet", kw_only=True):
    """ip:::send / ip:::receive: one IPv4 or IPv6 packet (providers.md 2)."""

    if_name: Annotated[Str, doc("interface name", brief=True)] = None
    if_index: Annotated[Int, doc("interface index")] = None
    if_local: Annotated[Bool, doc("the interface is loopback")] = None
    protocol: Annotated[Int, doc("next protocol number (IPv4 protocol / IPv6 next header)")] = None
    protocol_name: Annotated[Str, doc("next protocol name (TCP, UDP, ICMP, ...)", brief=True)] = None
    header_length: Annotated[Int, doc("IP header length (IPv6: with extension headers)", unit="bytes")] = None
    length: Annotated[Int, doc("IP total length", unit="bytes", brief=True)] = None
    payload_length: Annotated[Int, doc("IP payload length", unit="bytes")] = None
    ttl: Annotated[Int, doc("TTL (IPv4) or hop limit (IPv6)")] = None
    tos: Annotated[Int, doc("TOS byte / traffic class", hexa=True)] = None
    dscp: Annotated[Int, doc("DSCP code point")] = None
    ecn: Annotated[Int, doc("ECN bits (0 not-ECT, 1 ECT(1), 2 ECT(0), 3 CE)")] = None
    ident: Annotated[Int, doc("IPv4 identification")] = None
    frag_flags: Annotated[Int, doc("IPv4 flag bits: 4 reserved, 2 DF, 1 MF")] = None
    frag_offset: Annotated[Int, doc("fragment offset", unit="bytes")] = None
    is_fragment: Annotated[Bool, doc("the packet is a fragment (MF set or offset > 0, or an IPv6 fragment header)")] = None
    flow_label: Annotated[Int, doc("IPv6 flow label")] = None
    checksum: Annotated[Int, doc("header checksum (partial with TX offload)", hexa=True)] = None
    gso_segs: Annotated[Int, doc("segments this skb stands for (GSO/GRO); wire packets = gso_segs")] = None
    gso_size: Annotated[Int, doc("GSO segment size", unit="bytes")] = None
    frame: Annotated[Int, doc("frame number in the capture file (1-based)")] = None
    wire_length: Annotated[Int, doc("frame length on the wire", unit="bytes")] = None
    frame_bytes: Annotated[Blob, doc("captured frame bytes, kept for pcap export")] = None
    link_type: Annotated[Int, doc("pcap LINKTYPE of frame_bytes: 1 Ethernet, 101 raw IP, 113 Linux cooked, 276 Linux cooked v2")] = None


class UdpDatagram(FlowRecord, tag="udp_datagram", kw_only=True):
    """udp:::send / udp:::receive (and udplite): one datagram (providers.md 3)."""

    length: Annotated[Int, doc("UDP length, header + data (UDP-Lite: checksum coverage)", unit="bytes", brief=True)] = None
    payload_length: Annotated[Int, doc("datagram payload", unit="bytes")] = None
    checksum: Annotated[Int, doc("checksum (partial with TX offload)", hexa=True)] = None
    bytes: Annotated[Int, doc("bytes moved by the send/recv call (sock_send_length/sock_recv_length)", unit="bytes")] = None
    error: Annotated[Int, doc("negative errno of a failed call or queueing")] = None
    if_name: Annotated[Str, doc("interface name")] = None
    gso_segs: Annotated[Int, doc("datagrams this skb stands for (UDP GSO)")] = None
    frame: Annotated[Int, doc("frame number in the capture file (1-based)")] = None
    wire_length: Annotated[Int, doc("frame length on the wire", unit="bytes")] = None
    frame_bytes: Annotated[Blob, doc("captured frame bytes, kept for pcap export")] = None
    link_type: Annotated[Int, doc("pcap LINKTYPE of frame_bytes: 1 Ethernet, 101 raw IP, 113 Linux cooked, 276 Linux cooked v2")] = None
    icmp_error: Annotated[Str, doc("ICMP error quoting this flow, e.g. port-unreachable")] = None


class TcpSegment(FlowRecord, tag="tcp_segment", kw_only=True):
    """tcp:::send / tcp:::receive: one TCP segment, with Wireshark-style analysis for captures."""

    tcp_seq: Annotated[Int, doc("sequence number (absolute)")] = None
    tcp_ack: Annotated[Int, doc("acknowledgment number (absolute)")] = None
    rel_seq: Annotated[Int, doc("sequence number relative to the ISN", brief=True)] = None
    rel_ack: Annotated[Int, doc("acknowledgment number relative to the peer's ISN")] = None
    tcp_flags: Annotated[Int, doc("flag byte: FIN 0x01 SYN 0x02 RST 0x04 PUSH 0x08 ACK 0x10 URG 0x20 ECE 0x40 CWR 0x80", hexa=True)] = None
    tcp_flags_str: Annotated[Str, doc("set flags, e.g. SYN|ACK", brief=True)] = None
    tcp_offset: Annotated[Int, doc("data offset (header length)", unit="bytes")] = None
    tcp_window: Annotated[Int, doc("raw (unscaled) window field")] = None
    window_scaled: Annotated[Int, doc("window after the handshake's scale is applied", unit="bytes", brief=True)] = None
    tcp_checksum: Annotated[Int, doc("checksum", hexa=True)] = None
    tcp_urgent: Annotated[Int, doc("urgent pointer")] = None
    tcp_payload_len: Annotated[Int, doc("payload bytes", unit="bytes", brief=True)] = None
    opt_mss: Annotated[Int, doc("MSS option", unit="bytes")] = None
    opt_wscale: Annotated[Int, doc("window scale option (shift)")] = None
    opt_sack_permitted: Annotated[Bool, doc("SACK-permitted option present")] = None
    opt_sack_blocks: Annotated[list[list[int]] | None, doc("SACK blocks [left, right) (absolute)")] = None
    opt_ts_val: Annotated[Int, doc("timestamp option TSval")] = None
    opt_ts_ecr: Annotated[Int, doc("timestamp option TSecr")] = None
    direction: Annotated[Str, doc("orig (from the connection's originator) or resp", choices=("orig", "resp"))] = None
    stream: Annotated[Int, doc("connection index in the capture (like tcp.stream)")] = None
    frame: Annotated[Int, doc("frame number in the capture file (1-based)")] = None
    wire_length: Annotated[Int, doc("frame length on the wire", unit="bytes")] = None
    frame_bytes: Annotated[Blob, doc("captured frame bytes, kept for pcap export")] = None
    link_type: Annotated[Int, doc("pcap LINKTYPE of frame_bytes: 1 Ethernet, 101 raw IP, 113 Linux cooked, 276 Linux cooked v2")] = None
    if_name: Annotated[Str, doc("interface name")] = None
    analysis: Annotated[list[str], doc("tcp.analysis flags set on this segment", brief=True)] = msgspec.field(default_factory=list)
    dup_ack_num: Annotated[Int, doc("duplicate ACK ordinal (Dup ACK N#M: M)")] = None
    dup_ack_frame: Annotated[Int, doc("frame of the original ACK this duplicates")] = None
    ack_rtt_us: Annotated[Int, doc("RTT to the segment this ACK acknowledges", unit="us")] = None
    bytes_in_flight: Annotated[Int, doc("unacknowledged bytes after this segment", unit="bytes")] = None


# --- tcp provider events ---------------------------------------------------------------


class TcpStateChange(FlowRecord, tag="tcp_state", kw_only=True):
    """tcp:::state-change (and connect-*/accept-* derived probes) from inet_sock_set_state."""

    prev_state: Annotated[str, doc("state before the change (FreeBSD name)", choices=TCP_STATES, brief=True)]
    state: Annotated[str, doc("new state (FreeBSD name)", choices=TCP_STATES, brief=True)]
    linux_prev_state: Annotated[Int, doc("previous Linux enum tcp_state value")] = None
    linux_state: Annotated[Int, doc("new Linux enum tcp_state value")] = None
    inferred: Annotated[bool, doc("synthesized by nettrail, not reported by the kernel (TIME_WAIT)")] = False
    active: Annotated[Bool, doc("the connection was actively opened by this host")] = None
    caused_by: Annotated[Str, doc("who caused the transition: local process or remote peer", choices=("local", "peer"))] = None


class TcpRetransmit(FlowRecord, tag="tcp_retransmit", kw_only=True):
    """tcp:::retransmit (tcp_retransmit_skb) and retransmit-synack."""

    state: Annotated[Str, doc("connection state at the retransmission", choices=TCP_STATES, brief=True)] = None
    tcp_seq: Annotated[Int, doc("first sequence number retransmitted", brief=True)] = None
    tcp_seq_end: Annotated[Int, doc("sequence number after the retransmitted data")] = None
    tcp_payload_len: Annotated[Int, doc("retransmitted payload", unit="bytes")] = None
    tcp_flags: Annotated[Int, doc("flags of the retransmitted segment", hexa=True)] = None
    err: Annotated[Int, doc("result of the transmit (0 ok, negative errno)")] = None
    ca_state: Annotated[Str, doc("congestion state at the time", choices=CA_STATES, brief=True)] = None
    retrans_kind: Annotated[Str, doc("timeout (RTO), fast, syn, synack, tlp or unknown", choices=("rto", "fast", "syn", "synack", "tlp", "unknown"))] = None
    segs: Annotated[Int, doc("segments retransmitted (tcp_skb_pcount: what the kernel's TcpRetransSegs counts)")] = None


class TcpReset(FlowRecord, tag="tcp_reset", kw_only=True):
    """tcp:::reset-sent (tcp_send_reset) / reset-received (tcp_receive_reset)."""

    state: Annotated[Str, doc("state of the socket when the RST was sent or received", choices=TCP_STATES, brief=True)] = None
    sender: Annotated[str, doc("who sent the RST: local host or remote peer", choices=("local", "peer"), brief=True)]
    reason: Annotated[Str, doc("kernel RST reason (enum sk_rst_reason name)", brief=True)] = None
    active: Annotated[Bool, doc("local active reset (no provoking segment), e.g. SO_LINGER 0")] = None


class TcpCongState(FlowRecord, tag="tcp_cong_state", kw_only=True):
    """tcp-cong-state (tcp_cong_state_set): Open/Disorder/CWR/Recovery/Loss."""

    prev_ca_state: Annotated[Str, doc("congestion state before", choices=CA_STATES, brief=True)] = None
    ca_state: Annotated[str, doc("congestion state after", choices=CA_STATES, brief=True)]
    snd_cwnd: Annotated[Int, doc("congestion window", unit="bytes")] = None
    snd_ssthresh: Annotated[Int, doc("slow-start threshold", unit="bytes")] = None


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


class Connection(Record, tag="connection", kw_only=True):
    """Connection summary (Zeek-like for captures; final counters at tcp_destroy_sock live)."""

    proto: Annotated[str, doc("transport protocol", choices=("tcp", "udp", "udplite"), key=True, brief=True)]
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
    direction_guessed: Annotated[Bool, doc("no SYN seen: originator guessed from the ports")] = None
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
    completeness: Annotated[Int, doc("Wireshark conversation completeness: SYN 1, SYN-ACK 2, ACK 4, DATA 8, FIN 16, RST 32")] = None
    bytes_acked: Annotated[Int, doc("bytes acknowledged by the peer (tcp_sock.bytes_acked)", unit="bytes")] = None
    bytes_received: Annotated[Int, doc("bytes received in order (tcp_sock.bytes_received)", unit="bytes")] = None
    segs_in: Annotated[Int, doc("segments received (tcp_sock.segs_in)")] = None
    segs_out: Annotated[Int, doc("segments sent (tcp_sock.segs_out)")] = None
    total_retrans: Annotated[Int, doc("segments retransmitted over the life (tcp_sock.total_retrans)")] = None
    lifetime_ns: Annotated[Int, doc("socket lifetime from first sighting to destruction", unit="ns")] = None
    analysis: Annotated[AnalysisCounts | None, doc("packets per tcp.analysis flag (tshark filter counts)")] = None
    icmp_error: Annotated[Str, doc("last ICMP destination-unreachable error quoting this flow, e.g. port-unreachable")] = None
    icmp_errors: Annotated[Int, doc("ICMP destination-unreachable messages quoting this flow")] = None


# --- siftr and tcp debug ---------------------------------------------------------------


class SiftrSample(FlowRecord, tag="siftr_sample", kw_only=True):
    """tcp:::siftr: a snapshot of the control block at one packet (providers.md 6.2)."""

    direction: Annotated[str, doc("packet direction: in or out", choices=("in", "out"), brief=True)]
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
    th_seq: Annotated[Int, doc("sequence number of the triggering packet")] = None
    th_ack: Annotated[Int, doc("acknowledgment number of the triggering packet")] = None
    data_sz: Annotated[Int, doc("payload of the triggering packet", unit="bytes")] = None
    ca_state: Annotated[Str, doc("congestion state", choices=CA_STATES)] = None
    cc_algo: Annotated[Str, doc("congestion control algorithm")] = None


class TcpDebugSnapshot(FlowRecord, tag="tcpdebug_snapshot", kw_only=True):
    """tcp:::debug-input/output/user/drop: a full control-block snapshot (providers.md 5)."""

    direction: Annotated[str, doc("TA_* point: input, output, user, respond or drop", choices=DEBUG_DIRECTIONS, brief=True)]
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
    tcp_payload_len: Annotated[Int, doc("segment payload", unit="bytes")] = None
    drop_reason: Annotated[Str, doc("kernel drop reason (debug-drop)")] = None


# --- skb (mbuf) lifecycle ------------------------------------------------------------------


class SkbRecord(FlowRecord, kw_only=True):
    """The mbufinfo equivalent (providers.md 7.2)."""

    len: Annotated[Int, doc("skb->len", unit="bytes", brief=True)] = None
    linear_len: Annotated[Int, doc("bytes in the linear part", unit="bytes")] = None
    data_off: Annotated[Int, doc("skb->data - skb->head", unit="bytes")] = None
    truesize: Annotated[Int, doc("memory charged for the buffer", unit="bytes")] = None
    nr_frags: Annotated[Int, doc("paged fragments")] = None
    gso_segs: Annotated[Int, doc("GSO/GRO segments")] = None
    gso_size: Annotated[Int, doc("GSO segment size", unit="bytes")] = None
    pkt_type: Annotated[Int, doc("0 HOST 1 BROADCAST 2 MULTICAST 3 OTHERHOST 4 OUTGOING 5 LOOPBACK")] = None
    cloned: Annotated[Bool, doc("the data is shared with a clone")] = None
    protocol: Annotated[Int, doc("ethertype (skb->protocol)", hexa=True)] = None
    l4_proto: Annotated[Str, doc("transport protocol parsed from the headers (tcp, udp, icmp, ...)", brief=True)] = None
    if_index: Annotated[Int, doc("interface index")] = None
    if_name: Annotated[Str, doc("interface name", brief=True)] = None
    mark: Annotated[Int, doc("skb->mark", hexa=True)] = None
    m_flags_compat: Annotated[Int, doc("synthesized FreeBSD M_* flags", hexa=True)] = None


class SkbEvent(SkbRecord, tag="skb_event", kw_only=True):
    """One stage of a buffer's life: first seen, queued, transmitted, delivered, copied, consumed."""

    stage: Annotated[str, doc("stage: rx-first, tx-first, queue, xmit, rx-deliver, copy, retransmit, consume, last-seen", brief=True)]
    rc: Annotated[Int, doc("driver return code at net_dev_xmit (0 ok)")] = None
    since_prev_ns: Annotated[Int, doc("time since the previous stage of this buffer", unit="ns", brief=True)] = None
    since_first_ns: Annotated[Int, doc("time since the buffer was first seen", unit="ns")] = None
    end: Annotated[Str, doc("how the lifecycle ended, on terminal stages", choices=("consumed", "dropped", "last_seen"))] = None


class SkbDrop(SkbRecord, tag="skb_drop", kw_only=True):
    """m-free (drop): kfree_skb with its reason and kernel location."""

    drop_reason: Annotated[int, doc("enum skb_drop_reason value on this kernel")]
    drop_reason_str: Annotated[str, doc("drop reason name from the kernel's BTF, e.g. NO_SOCKET", brief=True, index=True)]
    drop_location: Annotated[Str, doc("kernel function and offset that dropped it, e.g. udp_queue_rcv_one_skb+0x1f4", brief=True)] = None
    since_first_ns: Annotated[Int, doc("time since the buffer was first seen", unit="ns")] = None


class DropCount(Record, tag="drop_count", kw_only=True):
    """Exact drops per (reason, location, protocol) from the in-kernel map, even when events are rate-limited."""

    drop_reason_str: Annotated[str, doc("drop reason name", key=True, brief=True, index=True)]
    drop_location: Annotated[Str, doc("kernel function and offset", key=True, brief=True)] = None
    protocol: Annotated[Int, doc("ethertype", key=True, hexa=True)] = None
    count: Annotated[int, doc("drops counted since the collector started", brief=True)]
    delta: Annotated[int, doc("drops since the previous report", brief=True)] = 0


class SockEvent(FlowRecord, tag="sock_event", kw_only=True):
    """Linux socket-level events: rcvqueue-full, exceed-buf-limit, udp-fail-queue, error-report."""

    proto: Annotated[Str, doc("socket protocol (tcp, udp, ...)", brief=True)] = None
    rc: Annotated[Int, doc("return code or negative errno", brief=True)] = None
    rmem_alloc: Annotated[Int, doc("receive memory allocated to the socket", unit="bytes")] = None
    truesize: Annotated[Int, doc("truesize of the buffer that did not fit", unit="bytes")] = None
    rcvbuf: Annotated[Int, doc("socket receive buffer limit", unit="bytes")] = None
    sk_err: Annotated[Int, doc("socket error (errno)")] = None


class FlowCounters(FlowRecord, tag="flow_counters", kw_only=True):
    """Exact per-flow counters kept in the kernel regardless of sampling (ppl)."""

    proto: Annotated[str, doc("transport protocol", choices=("tcp", "udp", "udplite"), brief=True)]
    packets_in: Annotated[int, doc("packets received", brief=True)] = 0
    packets_out: Annotated[int, doc("packets sent", brief=True)] = 0
    bytes_in: Annotated[int, doc("payload bytes received", unit="bytes", brief=True)] = 0
    bytes_out: Annotated[int, doc("payload bytes sent", unit="bytes", brief=True)] = 0
    samples: Annotated[int, doc("sample records emitted for this flow")] = 0


class IpFlowCounters(FlowRecord, tag="ip_flow_counters", kw_only=True):
    """ip-flows (the ip provider's always-on mode): exact packet and byte counts of one flow
    in one direction on one interface, kept in the kernel and reported periodically."""

    direction: Annotated[str, doc("send (net_dev_queue) or receive (netif_receive_skb)", choices=("send", "receive"), key=True, brief=True)]
    if_index: Annotated[int, doc("interface index", key=True)]
    protocol: Annotated[int, doc("IP protocol number (IPv4 protocol / IPv6 next header)", key=True)]
    protocol_name: Annotated[Str, doc("IP protocol name (TCP, UDP, ICMP, ...)", brief=True)] = None
    packets: Annotated[int, doc("packets (skbs at the device, as tcpdump counts them) since the entry was created", brief=True)]
    bytes: Annotated[int, doc("IP bytes (header and payload) since the entry was created", unit="bytes", brief=True)]
    packets_delta: Annotated[int, doc("packets since the previous report of this entry")]
    bytes_delta: Annotated[int, doc("IP bytes since the previous report of this entry", unit="bytes")]
    samples: Annotated[int, doc("ip_packet records emitted for this entry (--ip-sample)")] = 0
    sampling: Annotated[Int, doc("one ip_packet record per this many packets of the entry (--ip-sample); none: counters only")] = None
    start_ts_ns: Annotated[Int, doc("kernel time the entry was created (a new value: the entry was evicted and recreated)", unit="ns")] = None
    end_ts_ns: Annotated[Int, doc("kernel time of the entry's last packet", unit="ns")] = None


# --- self-health and alerts ------------------------------------------------------------------


class LossReport(Record, tag="loss_report", kw_only=True):
    """Tracing blind spots: ring-buffer reservation failures (or malformed input) by event type,
    and (probe `skipped`) runs of a program the kernel skipped because it was already running on that CPU."""

    event_type: Annotated[str, doc("event type that was lost, or '<program> runs' for skipped runs", key=True, brief=True)]
    lost: Annotated[int, doc("events lost since the previous report", brief=True)]
    lost_total: Annotated[int, doc("events lost since the collector started", brief=True)]
    received_total: Annotated[Int, doc("events received since the collector started")] = None
    per_cpu: Annotated[list[int] | None, doc("lost_total per CPU")] = None


class StackCounter(Record, tag="stack_counter", kw_only=True):
    """A TCP/IP MIB counter of /proc/net/netstat or /proc/net/snmp that moved (per network namespace)."""

    mib: Annotated[str, doc("MIB group of the counter, e.g. TcpExt or Tcp", key=True)]
    counter: Annotated[str, doc("counter name as the kernel spells it, e.g. ListenOverflows", key=True, brief=True, index=True)]
    value: Annotated[int, doc("counter value when read", brief=True)]
    delta: Annotated[int, doc("increase since the previous report", brief=True)]


class SamplingReport(Record, tag="sampling_report", kw_only=True):
    """H2: how sampled or rate-limited one event type was in one window, from the kernel's exact
    counts (flows, ip_flows, drops maps) against the records the collector emitted."""

    event_type: Annotated[str, doc("record kind that is sampled: siftr_sample, ip_packet or skb_drop", key=True, brief=True)]
    setting: Annotated[str, doc("what samples it, e.g. 'ppl 8', 'ip-sample 4', 'drop-rate 100/s per CPU'", brief=True)]
    window_s: Annotated[float, doc("length of the window the counts cover", unit="s", fmt="%.3f")]
    observed: Annotated[int, doc("events the kernel counted exactly in the window (packets, drops)", brief=True)]
    emitted: Annotated[int, doc("records of event_type emitted for them in the window", brief=True)]
    ratio: Annotated[Float, doc("observed / emitted: one record per this many events; null when none was emitted", fmt="%.2f", brief=True)] = None


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
    stack_counters: Annotated[Bool, doc("the TCP MIB counters of /proc/net are read (stack_counter records)")] = None


class CollectorStats(Record, tag="collector_stats", kw_only=True):
    """H4 self-overhead: the collector's own CPU use and event rate over one interval
    (envelope pid/comm: the collector process)."""

    interval_s: Annotated[float, doc("wall-clock length of the interval", unit="s", fmt="%.3f")]
    cpu_time_s: Annotated[float, doc("CPU time (user + system, all threads) the collector used in the interval", unit="s", fmt="%.3f")]
    cpu_total_s: Annotated[float, doc("CPU time the collector used since it started, as /proc/PID/stat utime + stime", unit="s", fmt="%.3f")]
    cpu_percent: Annotated[float, doc("cpu_time_s / interval_s: share of one CPU", unit="%", fmt="%.2f", brief=True)]
    events: Annotated[int, doc("kernel events read from the ring buffer in the interval")]
    events_per_s: Annotated[float, doc("events / interval_s", fmt="%.1f", brief=True)]
    records: Annotated[int, doc("records the collector emitted in the interval")]
    events_by_type: Annotated[dict[str, int], doc("events read in the interval by event type")] = msgspec.field(default_factory=dict)
    rss_bytes: Annotated[Int, doc("resident memory of the collector at the end of the interval", unit="bytes")] = None


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


RECORD_TYPES: tuple[type[Record], ...] = (
    IpPacket,
    UdpDatagram,
    TcpSegment,
    TcpStateChange,
    TcpRetransmit,
    TcpReset,
    TcpCongState,
    Connection,
    SiftrSample,
    TcpDebugSnapshot,
    SkbEvent,
    SkbDrop,
    DropCount,
    SockEvent,
    FlowCounters,
    IpFlowCounters,
    LossReport,
    StackCounter,
    SamplingReport,
    CollectorStatus,
    CollectorStats,
    Alert,
)
BY_KIND: dict[str, type[Record]] = {t.__struct_config__.tag: t for t in RECORD_TYPES}  # type: ignore[misc]
for _kind, _cls in BY_KIND.items():
    # A plain class attribute per kind shadows the Record.kind property: `rec.kind` is
    # read per record on hot paths (ingest hooks, formatters) and a property call is
    # several times slower than an attribute lookup.
    type.__setattr__(_cls, "kind", _kind)
AnyRecord = Union[RECORD_TYPES]  # type: ignore[valid-type]  # noqa: UP007 (built from a tuple at runtime)


# --- identity ----------------------------------------------------------------------------------

_CONN_NAMESPACE = uuid.UUID("6f2d7a1e-3b5c-4c1e-9f51-6e6574747261")


def connection_uuid(host_id: str, boot_id: str, cookie: int) -> str:
    """Persistent connection id: the same socket always gets the same UUID (cookies never repeat in a boot)."""
    return str(uuid.uuid5(_CONN_NAMESPACE, f"{host_id}/{boot_id}/{cookie}"))


def flow_uuid(host_id: str, boot_id: str, proto: str, stream: int) -> str:
    """Connection id for a capture flow: host/capture id + protocol + stream index."""
    return str(uuid.uuid5(_CONN_NAMESPACE, f"{host_id}/{boot_id}/{proto}/{stream}"))


# --- field descriptions (the single source for xo, models, docs) -------------------------------


@dataclass(frozen=True)
class FieldDesc:
    name: str
    type: Any  # the Python type without None/Annotated: int, float, str, bool, list, dict, Struct
    nullable: bool
    required: bool
    description: str
    unit: str | None = None
    fmt: str | None = None
    key: bool = False
    brief: bool = False
    choices: tuple[str, ...] | None = None
    hexa: bool = False
    index: bool = False
    item_type: Any = None  # element type of list fields


def _strip(tp: Any) -> tuple[Any, bool, msgspec.Meta | None]:
    meta = None
    if typing.get_origin(tp) is Annotated:
        tp, *extras = typing.get_args(tp)
        meta = next((e for e in extras if isinstance(e, msgspec.Meta)), None)
    nullable = False
    if typing.get_origin(tp) in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = len(args) < len(typing.get_args(tp))
        tp = args[0] if len(args) == 1 else Union[tuple(args)]  # noqa: UP007 (built from a list at runtime)
    return tp, nullable, meta


@functools.cache
def describe(cls: type[msgspec.Struct]) -> tuple[FieldDesc, ...]:
    """Ordered field descriptions of a record type: envelope first, then its own fields."""
    hints = typing.get_type_hints(cls, include_extras=True)
    info = {f.name: f for f in msgspec.structs.fields(cls)}
    out = []
    for name, hint in hints.items():
        if name not in info:
            continue
        tp, nullable, meta = _strip(hint)
        extra = dict(meta.extra or {}) if meta is not None else {}
        origin = typing.get_origin(tp)
        item_type = typing.get_args(tp)[0] if origin is list else None
        f = info[name]
        out.append(
            FieldDesc(
                name=name,
                type=origin or tp,
                nullable=nullable,
                required=f.required,
                description=(meta.description or "") if meta is not None else "",
                unit=extra.get("unit"),
                fmt=extra.get("fmt"),
                key=bool(extra.get("key")),
                brief=bool(extra.get("brief")),
                choices=extra.get("choices"),
                hexa=bool(extra.get("hexa")),
                index=bool(extra.get("index")),
                item_type=item_type,
            )
        )
    return tuple(out)


@dataclass(frozen=True)
class _Plan:
    """Per-class validation data, built once: allowed types in struct field order
    (the order of msgspec.structs.astuple) and the fields that have choices."""

    types: tuple[frozenset[type], ...]
    choices: tuple[tuple[str, tuple[str, ...]], ...]
    checks: tuple[tuple[str, tuple[type, ...], tuple[str, ...] | None], ...]


class _DecodingFlag(threading.local):
    active = False  # True while this thread's msgspec decoder builds records


_PLANS: dict[type, _Plan] = {}
_DECODING = _DecodingFlag()


def _plan(cls: type[Record]) -> _Plan:
    checks = _checks(cls)
    allowed = {name: frozenset(types_) for name, types_, _ in checks}
    plan = _Plan(
        types=tuple(allowed[name] for name in cls.__struct_fields__),
        choices=tuple((name, choices) for name, _, choices in checks if choices is not None),
        checks=checks,
    )
    _PLANS[cls] = plan
    return plan


def _raise_type_error(rec: Record, plan: _Plan) -> typing.NoReturn:
    for name, allowed, _ in plan.checks:
        value = getattr(rec, name)
        if type(value) not in allowed:
            expected = "|".join(t.__name__ for t in allowed)
            raise TypeError(f"{rec.kind}.{name}: expected {expected}, got {type(value).__name__} ({value!r:.60})")
    raise AssertionError("no field failed the check")  # pragma: no cover


@contextlib.contextmanager
def _decoding() -> typing.Iterator[None]:
    """Marks this thread as decoding, so __post_init__ skips the type checks msgspec did."""
    outer = _DECODING.active
    _DECODING.active = True
    try:
        yield
    finally:
        _DECODING.active = outer


@functools.cache
def _checks(cls: type[Record]) -> tuple[tuple[str, tuple[type, ...], tuple[str, ...] | None], ...]:
    checks = []
    for f in describe(cls):
        base = f.type
        if isinstance(base, type) and issubclass(base, msgspec.Struct):
            allowed: tuple[type, ...] = (base,)
        elif typing.get_origin(base) is Union:
            allowed = tuple(typing.get_args(base))
        else:
            allowed = (base,)
        if float in allowed:
            allowed = (*allowed, int)
        if f.nullable:
            allowed = (*allowed, type(None))
        checks.append((f.name, allowed, f.choices))
    return tuple(checks)


# --- wire forms ------------------------------------------------------------------------------------

# Fix-ups applied to decoded dicts of older schema versions, oldest first:
# {"netprov/0": [fn(dict) -> dict, ...]}.


def _v1_to_v2(record: dict[str, Any]) -> dict[str, Any]:
    """netprov/2 added collector_status.degraded: a netprov/1 collector named no degradations."""
    if record.get("kind") == "collector_status":
        record.setdefault("degraded", {})
    record["schema"] = "netprov/2"
    return record


UPGRADES: dict[str, list[typing.Callable[[dict[str, Any]], dict[str, Any]]]] = {"netprov/1": [_v1_to_v2]}

_json_encoder = msgspec.json.Encoder()
_msgpack_encoder = msgspec.msgpack.Encoder()
_json_decoder = msgspec.json.Decoder(AnyRecord)
_msgpack_decoder = msgspec.msgpack.Decoder(AnyRecord)
_json_batch_decoder = msgspec.json.Decoder(list[AnyRecord])
_msgpack_batch_decoder = msgspec.msgpack.Decoder(list[AnyRecord])


def to_json(record: Record) -> bytes:
    return _json_encoder.encode(record)


def to_msgpack(record: Record) -> bytes:
    return _msgpack_encoder.encode(record)


def from_json(data: bytes | str) -> Record:
    with _decoding():
        return typing.cast(Record, _json_decoder.decode(data))


def from_msgpack(data: bytes) -> Record:
    with _decoding():
        return typing.cast(Record, _msgpack_decoder.decode(data))


def decode_batch(data: bytes, content_type: Literal["json", "msgpack"]) -> list[Record]:
    """Decode a list of records; raises msgspec.ValidationError naming `$[index].field`."""
    decoder = _json_batch_decoder if content_type == "json" else _msgpack_batch_decoder
    with _decoding():
        return typing.cast(list[Record], decoder.decode(data))


def to_builtins(record: Record) -> dict[str, Any]:
    """The dict form (kind included) used for websocket payloads and templates."""
    return typing.cast(dict[str, Any], msgspec.to_builtins(record))
