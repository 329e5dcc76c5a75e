"""Stored records for the report tests: two hosts, three connections, unattributed records.

host `alpha`: connection A (cookie 101: handshake, 3 SIFTR samples, a retransmit, a K1
alert, a reset, close) and connection B (cookie 102: one state change, 2 samples);
unattributed: 2 loss reports (5 + 2 lost), a drop count, a NO_SOCKET drop, an H1 alert.
host `beta`: connection C (cookie 201: one state change, one TCP_CSUM drop).
Times: alpha records at 1000 + seq, beta at 2000 + seq (wall seconds); `plausible` moves
them for ingest.
"""

from __future__ import annotations

from typing import Any

import msgspec

from translators import records as r
from webapp.traces.models import Host
from webapp.traces.store import store_batch

BOOT = "boot-1"
CONN_A = r.connection_uuid("alpha", BOOT, 101)
CONN_B = r.connection_uuid("alpha", BOOT, 102)
CONN_C = r.connection_uuid("beta", BOOT, 201)
K1 = {"min_ratio": 0.02, "window_s": 30}


def env(host: str, seq: int, conn: str | None = None, **kw: Any) -> dict[str, Any]:
    base = 1000.0 if host == "alpha" else 2000.0
    flow = {"src": "10.0.0.1", "sport": 40000 + seq, "dst": "10.0.0.2", "dport": 443, "ip_ver": 4} if conn else {}
    return {"host_id": host, "boot_id": BOOT, "seq": seq, "ts_ns": 10**9 * seq, "ts_wall": base + seq,
            "conn_uuid": conn, **flow, **kw}  # fmt: skip


def state(host: str, seq: int, conn: str, prev: str, new: str) -> r.TcpStateChange:
    return r.TcpStateChange(**env(host, seq, conn), provider="tcp", probe="state-change", prev_state=prev, state=new)


def sample(host: str, seq: int, conn: str, cwnd: int) -> r.SiftrSample:
    return r.SiftrSample(
        **env(host, seq, conn), provider="siftr", probe="siftr", direction="out", snd_cwnd=cwnd, srtt=2000,
        snd_ssthresh=65535, mss=1448, conn_state=4, sack_enabled=True, snd_scale=7, rcv_scale=7,
    )  # fmt: skip


def alert(host: str, seq: int, conn: str | None, rule: str, thresholds: dict[str, Any]) -> r.Alert:
    return r.Alert(**env(host, seq, conn), provider="nettrail", probe="alert", rule_id=rule, severity="warning",
                   start=1000.0 + seq, message=f"{rule} fired", thresholds=thresholds)  # fmt: skip


def loss(seq: int, lost: int) -> r.LossReport:
    return r.LossReport(**env("alpha", seq), provider="linux", probe="loss", event_type="tcp_probe", lost=lost,
                        lost_total=lost)  # fmt: skip


def skb_drop(host: str, seq: int, conn: str | None, reason: str) -> r.SkbDrop:
    return r.SkbDrop(**env(host, seq, conn), provider="skb", probe="m-free", drop_reason=2, drop_reason_str=reason)


def alpha_records() -> list[r.Record]:
    return [
        state("alpha", 1, CONN_A, "CLOSED", "SYN_SENT"),
        state("alpha", 2, CONN_A, "SYN_SENT", "ESTABLISHED"),
        sample("alpha", 3, CONN_A, 14480),
        sample("alpha", 4, CONN_A, 28960),
        sample("alpha", 5, CONN_A, 43440),
        r.TcpRetransmit(**env("alpha", 6, CONN_A), provider="tcp", probe="retransmit", state="ESTABLISHED"),
        alert("alpha", 7, CONN_A, "K1", K1),
        r.TcpReset(**env("alpha", 8, CONN_A), provider="tcp", probe="reset-received", sender="peer"),
        state("alpha", 9, CONN_A, "ESTABLISHED", "CLOSED"),
        state("alpha", 10, CONN_B, "SYN_SENT", "ESTABLISHED"),
        sample("alpha", 11, CONN_B, 14480),
        sample("alpha", 12, CONN_B, 14480),
        loss(20, 5),
        loss(21, 2),
        r.DropCount(**env("alpha", 22), provider="skb", probe="drop-count", drop_reason_str="NO_SOCKET", count=9),
        skb_drop("alpha", 23, None, "NO_SOCKET"),
        alert("alpha", 24, None, "H1", {"min_count": 5}),
    ]


def beta_records() -> list[r.Record]:
    return [state("beta", 1, CONN_C, "SYN_SENT", "ESTABLISHED"), skb_drop("beta", 2, CONN_C, "TCP_CSUM")]


def store_cast() -> None:
    Host.objects.create(name="alpha")
    Host.objects.create(name="beta")
    store_batch(alpha_records())
    store_batch(beta_records())


INGEST_SHIFT = 1_699_999_000.0  # alpha's 1000 + seq becomes 1_700_000_000 + seq (2023-11-14)


def plausible(records: list[r.Record]) -> list[r.Record]:
    """The records moved to plausible wall times, for /api/ingest (which refuses times before
    2000: webapp/traces/timestamps.py); stored directly they keep their small times."""
    out: list[r.Record] = []
    for rec in records:
        moved = msgspec.structs.replace(rec, ts_wall=rec.ts_wall + INGEST_SHIFT)
        if isinstance(moved, r.Alert):
            moved = msgspec.structs.replace(moved, start=moved.start + INGEST_SHIFT)
        out.append(moved)
    return out
