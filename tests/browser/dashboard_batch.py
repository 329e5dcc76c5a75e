"""A recorded batch for the browser tests: one TCP connection's whole life, as the collector
would send it through /api/ingest (state changes, SIFTR samples, segments with a
retransmission and SACKs, tcpdebug snapshots, buffers with a drop, an alert, the final
summary), plus a UDP flow. Timestamps are "now"-relative so the overview's rates see it.
Keep in sync with: translators/records.py (field names), the expectations in test_dashboard_*.py.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from translators.records import (
    Alert,
    Connection,
    DropCount,
    Record,
    SiftrSample,
    SkbDrop,
    SkbEvent,
    TcpDebugSnapshot,
    TcpRetransmit,
    TcpSegment,
    TcpStateChange,
    UdpDatagram,
    connection_uuid,
)

BOOT = "5e1f0c2a-browser-test"
STATES = ("SYN_SENT", "ESTABLISHED", "FIN_WAIT_1", "FIN_WAIT_2", "TIME_WAIT", "CLOSED")
SIFTR_SAMPLES = 200
DATA_SEGMENTS = 60
MSS = 1448
RETRANSMITTED = (20, 41)  # data segment indexes sent twice
DROP_REASON = "NETFILTER_DROP"


@dataclass
class Batch:
    host: str
    sport: int
    dport: int = 8443
    cookie: int = 1
    comm: str = "curl"
    pid: int = 4242
    records: list[Record] = field(default_factory=list)
    uuid: str = ""
    alert_seqs: list[int] = field(default_factory=list)


_seq = itertools.count(1)  # unique (host, boot, seq) across every batch of a test session


def build(host: str, sport: int, cookie: int, *, now: float | None = None) -> Batch:
    """All the records of one connection 127.0.0.1:sport -> 127.0.0.1:8443 owned by curl."""
    b = Batch(host=host, sport=sport, cookie=cookie)
    b.uuid = connection_uuid(host, BOOT, cookie)
    t0 = (now if now is not None else time.time()) - 4.0
    mono0 = 1_000_000_000_000

    def env(offset_s: float, provider: str, probe: str, **kw: object) -> dict[str, object]:
        return {
            "host_id": host, "boot_id": BOOT, "seq": next(_seq), "ts_ns": mono0 + int(offset_s * 1e9),
            "ts_wall": t0 + offset_s, "provider": provider, "probe": probe, "conn_uuid": b.uuid,
            "sock_cookie": cookie, "ip_ver": 4, "src": "127.0.0.1", "sport": sport, "dst": "127.0.0.1",
            "dport": b.dport, **kw,
        }  # fmt: skip

    owner = {"pid": b.pid, "tgid": b.pid, "comm": b.comm, "uid": 1000, "ctx": "task"}
    causes = (("local", owner), ("peer", {}), ("local", owner), ("peer", {}), ("peer", {}), (None, {}))
    prev = "CLOSED"
    for i, (state, (cause, who)) in enumerate(zip(STATES, causes, strict=True)):
        at = (0.0, 0.05, 2.5, 2.6, 2.7, 3.5)[i]
        b.records.append(
            TcpStateChange(
                **env(at, "tcp", "state-change", **who),
                prev_state=prev,
                state=state,
                caused_by=cause,
                inferred=state == "CLOSED",
            )  # type: ignore[arg-type]
        )
        prev = state
    for i in range(SIFTR_SAMPLES):
        at = 0.05 + i * 0.012
        b.records.append(
            SiftrSample(
                **env(at, "siftr", "siftr"),  # type: ignore[arg-type]
                direction="out" if i % 2 else "in",
                snd_cwnd=MSS * (10 + i if i < 120 else 60 + i % 7),
                snd_ssthresh=0x7FFFFFFF if i < 120 else MSS * 60,
                snd_wnd=65535 * 4,
                rcv_wnd=65535 * 2 + i * 10,
                srtt=80 + (i % 13) * 3,
                rttvar=20 + (i % 5),
                sent_inflight_bytes=MSS * (i % 30),
            )
        )
    isn = 1_000_000
    seg_seq = 0
    retrans_seqs = []
    for i in range(DATA_SEGMENTS):
        at = 0.06 + i * 0.03
        rel = 1 + i * MSS
        b.records.append(
            TcpSegment(
                **env(at, "tcp", "send"),  # type: ignore[arg-type]
                tcp_seq=isn + rel,
                rel_seq=rel,
                tcp_ack=5000,
                tcp_flags=0x18,
                tcp_flags_str="PUSH|ACK",
                tcp_payload_len=MSS,
                direction="orig",
            )  # fmt: skip
        )
        if i in RETRANSMITTED:
            b.records.append(
                TcpSegment(
                    **env(at + 0.2, "tcp", "send"),  # type: ignore[arg-type]
                    tcp_seq=isn + rel,
                    rel_seq=rel,
                    tcp_ack=5000,
                    tcp_flags=0x18,
                    tcp_flags_str="PUSH|ACK",
                    tcp_payload_len=MSS,
                    direction="orig",
                    analysis=["retransmission"],
                )  # fmt: skip
            )
            retrans = TcpRetransmit(
                **env(at + 0.2, "tcp", "retransmit"),
                state="ESTABLISHED",
                tcp_seq=isn + rel,
                tcp_payload_len=MSS,
                retrans_kind="rto",
            )  # type: ignore[arg-type]
            b.records.append(retrans)
            retrans_seqs.append(retrans.seq)
        reply = {"src": "127.0.0.1", "sport": b.dport, "dst": "127.0.0.1", "dport": sport}
        sack = [[isn + rel + MSS, isn + rel + 2 * MSS]] if i + 1 in RETRANSMITTED else None
        b.records.append(
            TcpSegment(
                **{**env(at + 0.01, "tcp", "receive"), **reply},  # type: ignore[arg-type]
                tcp_seq=5000,
                tcp_ack=isn + rel + (0 if sack else MSS),
                tcp_flags=0x10,
                tcp_flags_str="ACK",
                tcp_payload_len=0,
                direction="resp",
                opt_sack_blocks=sack,
            )  # fmt: skip
        )
        seg_seq = rel
    for i, (direction, state) in enumerate(
        (
            ("user", "SYN_SENT"),
            ("output", "SYN_SENT"),
            ("input", "ESTABLISHED"),
            ("output", "ESTABLISHED"),
            ("input", "FIN_WAIT_1"),
        )
    ):
        b.records.append(
            TcpDebugSnapshot(
                **env(0.01 + i * 0.6, "tcpdebug", f"debug-{direction}"),  # type: ignore[arg-type]
                direction=direction,
                state=state,
                prureq_str="CONNECT" if direction == "user" else None,
                snd_una=isn + i * 1000,
                snd_nxt=isn + i * 1000 + MSS,
                rcv_nxt=5000,
                snd_cwnd=MSS * 10,
                snd_ssthresh=MSS * 60,
                srtt_us=90,
                rto_ms=201,
                ca_state="Open",
                tcp_flags=0x12 if i == 1 else 0x10,
            )  # fmt: skip
        )
    skb_base = cookie * 1000
    for n in range(3):
        stages = (("tx-first", 0), ("queue", 3_000), ("xmit", 12_000 + n * 1000), ("consume", 40_000))
        since_first = 0
        for k, (stage, delta) in enumerate(stages):
            since_first += delta
            b.records.append(
                SkbEvent(
                    **env(1.0 + n * 0.1 + since_first / 1e9, "skb", "m-stage"),  # type: ignore[arg-type]
                    skb_uid=skb_base + n,
                    stage=stage,
                    since_prev_ns=delta if k else None,
                    since_first_ns=since_first,
                    len=MSS + 66,
                    if_name="lo",
                    l4_proto="tcp",
                    end="consumed" if stage == "consume" else None,
                )  # fmt: skip
            )
    dropped = skb_base + 9
    b.records.append(
        SkbEvent(
            **env(1.5, "skb", "m-stage"),
            skb_uid=dropped,
            stage="tx-first",
            since_first_ns=0,
            len=MSS + 66,
            if_name="lo",
            l4_proto="tcp",
        )
    )  # type: ignore[arg-type]
    b.records.append(
        SkbEvent(
            **env(1.500004, "skb", "m-stage"),
            skb_uid=dropped,
            stage="queue",
            since_prev_ns=4_000,
            since_first_ns=4_000,
            len=MSS + 66,
            if_name="lo",
            l4_proto="tcp",
        )
    )  # type: ignore[arg-type]
    b.records.append(
        SkbDrop(
            **env(1.50002, "skb", "m-free", **owner),  # type: ignore[arg-type]
            skb_uid=dropped,
            drop_reason=6,
            drop_reason_str=DROP_REASON,
            drop_location="nf_hook_slow+0x9c",
            since_first_ns=20_000,
            len=MSS + 66,
            l4_proto="tcp",
            if_name="lo",
        )  # fmt: skip
    )
    b.alert_seqs = retrans_seqs
    b.records.append(
        Alert(
            **env(2.0, "nettrail", "alert"),  # type: ignore[arg-type]
            rule_id="K1",
            severity="warning",
            start=t0 + 0.7,
            end=t0 + 1.4,
            count=len(retrans_seqs),
            proto="tcp",
            message=f"{len(retrans_seqs)} RTO retransmissions on {b.comm} :{sport}",
            evidence=retrans_seqs,
            thresholds={"retransmits": 1},
        )  # fmt: skip
    )
    b.records.append(
        Connection(
            **{k: v for k, v in env(3.5, "nettrail", "conn-summary").items() if k not in ("sock_cookie",)},  # type: ignore[arg-type]
            proto="tcp",
            source="kernel",
            start=t0,
            end=t0 + 3.5,
            duration=3.5,
            bytes_orig=seg_seq + MSS - 1,
            bytes_resp=0,
            state="CLOSED",
            total_retrans=len(RETRANSMITTED),
            handshake_rtt_us=95,
        )  # fmt: skip
    )
    b.records.append(
        DropCount(
            **{
                k: v
                for k, v in env(3.6, "skb", "drop-count").items()
                if k not in ("conn_uuid", "sock_cookie", "ip_ver", "src", "sport", "dst", "dport")
            },
            drop_reason_str=DROP_REASON,
            drop_location="nf_hook_slow+0x9c",
            count=1,
            delta=1,
        )  # type: ignore[arg-type]
    )
    for i in range(5):
        udp = {
            "src": "127.0.0.1",
            "sport": 5353,
            "dst": "127.0.0.1",
            "dport": 15353 + cookie,
            "conn_uuid": None,
            "sock_cookie": None,
        }
        b.records.append(
            UdpDatagram(**{**env(0.5 + i * 0.1, "udp", "send", **owner), **udp}, length=8 + 100, payload_length=100)
        )  # type: ignore[arg-type]
    return b
