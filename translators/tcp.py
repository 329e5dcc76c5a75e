"""tcp provider: raw kernel events -> TcpStateChange, TcpRetransmit, TcpReset, TcpCongState, Connection.

Pure functions, one per event type (providers.md 4, 8). State names are FreeBSD's;
TIME_WAIT, which Linux never reports for the full socket, is synthesized and
flagged `inferred` (providers.md 4.5). Keep in sync with: kmod/nettrail.h (tcp
provider bodies), kmod/tcp.bpf.c (what each field holds), docs/collector.md.
"""

from __future__ import annotations

from translators.kernel import KernelEnv, KernelRecord, Raw, ca_state_name, envelope, make, state_name
from translators.records import Connection, TcpCongState, TcpReset, TcpRetransmit, TcpStateChange

# Linux enum tcp_state values used below
ESTABLISHED, SYN_SENT, SYN_RECV, FIN_WAIT1, FIN_WAIT2, CLOSE, CLOSE_WAIT, LAST_ACK, LISTEN, CLOSING = (
    1, 2, 3, 4, 5, 7, 8, 9, 10, 11,
)  # fmt: skip
# A full socket leaving these states for CLOSE without an error became a timewait mini-socket.
TIME_WAIT_FROM = frozenset({FIN_WAIT1, FIN_WAIT2, CLOSING})
STATE_FIN_RCVD = 0x01  # nt_state_body.flags: NT_STATE_FIN_RCVD (the peer's FIN had come)
# Transitions in softirq that only a segment from the peer causes.
PEER_CAUSED = frozenset(
    {
        (SYN_SENT, ESTABLISHED),
        (SYN_RECV, ESTABLISHED),
        (LISTEN, SYN_RECV),
        (ESTABLISHED, CLOSE_WAIT),
        (FIN_WAIT1, FIN_WAIT2),
        (FIN_WAIT1, CLOSING),
        (LAST_ACK, CLOSE),
        (CLOSING, CLOSE),
    }
)
TCP_FLAG_FIN, TCP_FLAG_SYN = 0x01, 0x02
CA_LOSS, CA_RECOVERY = 4, 3
ICSK_TIME_LOSS_PROBE = 5  # include/net/inet_connection_sock.h: icsk_pending while the TLP timer runs
TCP_INFINITE_SSTHRESH = 0x7FFFFFFF
FREEBSD_INITIAL_SSTHRESH = 65535 << 14


def _state(value: int, what: str) -> str:
    name = state_name(value)
    if name is None:
        raise ValueError(f"tcp_state.{what}: unknown Linux tcp_state {value}")
    return name


def cwnd_bytes(segments: int, mss: int) -> int:
    return segments * mss


def ssthresh_bytes(segments: int, mss: int) -> int:
    """Linux keeps ssthresh in segments with 0x7fffffff for "infinite"; FreeBSD starts at 65535 << 14 bytes."""
    return FREEBSD_INITIAL_SSTHRESH if segments >= TCP_INFINITE_SSTHRESH else segments * mss


def translate_state(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    base = envelope(raw, env, "tcp", "state-change", "tp_btf/inet_sock_set_state")
    fin = bool(raw["flags"] & STATE_FIN_RCVD)
    return state_records(base, raw["oldstate"], raw["newstate"], raw["sk_err"], env, fin)


def state_records(
    base: dict[str, object], old: int, new: int, sk_err: int, env: KernelEnv, fin: bool | None = None
) -> list[KernelRecord]:
    """The records of one change old -> new given its envelope: translate_state's, and
    translators/tcp_lifecycle.py's expansion of a folded change (the same rules, one place).
    fin: on an X -> CLOSE, whether the peer's FIN had come (None: not known, as before
    issue 34). FIN_WAIT_1/2 -> CLOSE without it handed the socket to a timewait
    mini-socket waiting in FIN_WAIT_2 (an orphan whose FIN was acked), which ss lists as
    FIN-WAIT-2, not TIME-WAIT: no TIME_WAIT is inferred for it."""
    caused = "local" if base["ctx"] == "task" else "peer" if (old, new) in PEER_CAUSED else None
    active = True if (old, new) == (CLOSE, SYN_SENT) else False if (old, new) == (LISTEN, SYN_RECV) else None
    if into_time_wait(old, new, sk_err, fin):
        return _time_wait(base, old, caused, env)
    fin_wait2_timewait = new == CLOSE and old in (FIN_WAIT1, FIN_WAIT2) and sk_err == 0 and fin is False
    return [
        make(
            TcpStateChange,
            dict(
                **base,
                prev_state=_state(old, "prev_state"),
                state=_state(new, "state"),
                linux_prev_state=old,
                linux_state=new,
                active=active,
                caused_by=caused,
                timewait_state="FIN_WAIT_2" if fin_wait2_timewait else None,
            ),
            env,
        )
    ]


def into_time_wait(old: int, new: int, sk_err: int, fin: bool | None) -> bool:
    """Whether a change old -> new handed the socket to a timewait mini-socket in TIME_WAIT
    (state_records infers X -> TIME_WAIT, TIME_WAIT -> CLOSED for it)."""
    fin_wait2_timewait = fin is False and old in (FIN_WAIT1, FIN_WAIT2)
    return new == CLOSE and old in TIME_WAIT_FROM and sk_err == 0 and not fin_wait2_timewait


def _time_wait(base: dict[str, object], old: int, caused: str | None, env: KernelEnv) -> list[KernelRecord]:
    """X -> CLOSE of a full socket handed to a timewait mini-socket: X -> TIME_WAIT (inferred), TIME_WAIT -> CLOSED."""
    entered = make(
        TcpStateChange,
        dict(
            **base,
            prev_state=_state(old, "prev_state"),
            state="TIME_WAIT",
            linux_prev_state=old,
            inferred=True,
            caused_by=caused,
            approx=["state"],
        ),
        env,
    )
    closed = make(
        TcpStateChange,
        dict(
            **base,
            prev_state="TIME_WAIT",
            state="CLOSED",
            linux_prev_state=old,
            linux_state=CLOSE,
            caused_by=caused,
            approx=["prev_state"],
        ),
        env,
    )
    return [entered, closed]


def _retrans_kind(raw: Raw) -> str:
    """The cause, as the kernel's own counters tell them apart: TCPSynRetrans (SYN, SYN-ACK),
    TCPTimeouts and TCPSlowStartRetrans (in Loss: the RTO and what follows it), TCPFastRetrans
    (in Recovery), TCPLossProbes (a retransmission inside tcp_send_loss_probe, whose timer is
    still the pending one: TLP is scheduled only in Open and CWR)."""
    if raw["synack"]:
        return "synack"
    if raw["tcp_flags"] & TCP_FLAG_SYN:
        return "syn"
    if raw["ca_state"] == CA_LOSS:
        return "rto"
    if raw["ca_state"] == CA_RECOVERY:
        return "fast"
    if raw["timer"] == ICSK_TIME_LOSS_PROBE:
        return "tlp"
    return "unknown"


def translate_retransmit(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    synack = bool(raw["synack"])
    hook = "tp_btf/tcp_retransmit_synack" if synack else "tp_btf/tcp_retransmit_skb"
    flags = raw["tcp_flags"]
    span = (raw["end_seq"] - raw["seq"]) & 0xFFFFFFFF
    payload = max(0, span - bool(flags & TCP_FLAG_SYN) - bool(flags & TCP_FLAG_FIN))
    return [
        make(
            TcpRetransmit,
            dict(
                **envelope(raw, env, "tcp", "retransmit", hook),
                state=state_name(raw["state"]),
                tcp_seq=None if synack else raw["seq"],
                tcp_seq_end=None if synack else raw["end_seq"],
                tcp_payload_len=None if synack else payload,
                tcp_flags=flags,
                err=None if synack else raw["err"],
                ca_state=None if synack else ca_state_name(raw["ca_state"]),
                retrans_kind=_retrans_kind(raw),
                segs=raw["segs"],
            ),
            env,
        )
    ]


def translate_reset(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    received = raw["sender"] == 1
    probe, hook = (
        ("reset-received", "tp_btf/tcp_receive_reset") if received else ("reset-sent", "tp_btf/tcp_send_reset")
    )
    return [
        make(
            TcpReset,
            dict(
                **envelope(raw, env, "tcp", probe, hook),
                state=state_name(raw["state"]) if raw["has_sock"] else None,
                sender="peer" if received else "local",
                reason=None if received else env.rst_reasons.get(raw["reason"], str(raw["reason"])),
                active=None if received else bool(raw["active"]),
            ),
            env,
        )
    ]


def translate_cong(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    new = ca_state_name(raw["new_ca_state"])
    if new is None:
        raise ValueError(f"tcp_cong_state.ca_state: unknown tcp_ca_state {raw['new_ca_state']}")
    rec = make(
        TcpCongState,
        dict(
            **envelope(raw, env, "tcp", "cong-state", "tp_btf/tcp_cong_state_set"),
            prev_ca_state=ca_state_name(raw["old_ca_state"]),
            ca_state=new,
            snd_cwnd=cwnd_bytes(raw["snd_cwnd"], raw["mss"]),
            snd_ssthresh=ssthresh_bytes(raw["snd_ssthresh"], raw["mss"]),
            approx=["snd_cwnd", "snd_ssthresh"],
        ),
        env,
    )
    return [rec]


def translate_destroy(raw: Raw, env: KernelEnv) -> list[KernelRecord]:
    first = raw["first_ns"]
    end = env.wall(raw["ts_ns"])
    start = env.wall(first) if first else None
    return [
        make(
            Connection,
            dict(
                **envelope(raw, env, "tcp", "destroy", "tp_btf/tcp_destroy_sock"),
                proto="tcp",
                source="kernel",
                start=start,
                end=end,
                duration=round(end - start, 6) if start is not None else None,
                state=state_name(raw["state"]),
                bytes_acked=raw["bytes_acked"],
                bytes_received=raw["bytes_received"],
                segs_in=raw["segs_in"],
                segs_out=raw["segs_out"],
                total_retrans=raw["total_retrans"],
                lifetime_ns=raw["ts_ns"] - first if first else None,
            ),
            env,
        )
    ]
