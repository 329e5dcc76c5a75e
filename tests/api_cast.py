"""The fixed cast for the read-API tests, stored through the real ingest path (store_batch).

Who and what (every exact count in tests/test_api_*.py follows from this):
- users: `viewer` (logged in by `viewer_client`), an anonymous client;
- host alpha: connection A (curl pid 100 uid 1000, 10.0.0.1:40000 -> 10.0.0.2:443) with a
  full lifecycle -- two state changes, a SIFTR sample, a debug snapshot, a retransmit, a
  congestion-state change, two skb events (one tied to A only by skb_uid 77), a drop, a
  reset, an alert K1; connection B (nginx pid 200 uid 33, 10.0.0.2:80 <- 10.0.0.3:51000),
  ESTABLISHED, quiet; drops: 3 NO_SOCKET events (no process) + 1 TCP_CSUM (curl, A's
  drop), exact count 10 NO_SOCKET at nf+0x1; loss report ring buffer lost 5;
- host beta: connection C (curl pid 300 uid 1000, [2001:db8::1]:5555 -> [2001:db8::2]:443)
  SYN_SENT only; alert P4 critical closed; loss report lost 2.
Times: alpha's A at wall 1000-1010, B at 2000, beta's C at 3000.
"""

from __future__ import annotations

from typing import Any

from django.test import Client

from translators import records as r
from translators.records import connection_uuid

CONN_A = connection_uuid("alpha", "boot-a", 1)
CONN_B = connection_uuid("alpha", "boot-a", 2)
CONN_C = connection_uuid("beta", "boot-b", 3)


class Seq:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


def env(host: str, seq: Seq, wall: float, **kw: Any) -> dict[str, Any]:
    boot = "boot-a" if host == "alpha" else "boot-b"
    return {"host_id": host, "boot_id": boot, "seq": seq(), "ts_ns": int(wall * 1e9), "ts_wall": wall, **kw}


def flow_a(seq: Seq, wall: float, **kw: Any) -> dict[str, Any]:
    owner = {"pid": 100, "tgid": 100, "comm": "curl", "uid": 1000, "ctx": "task"}
    return env(
        "alpha", seq, wall, conn_uuid=CONN_A, src="10.0.0.1", sport=40000, dst="10.0.0.2", dport=443, **owner, **kw
    )


def alpha_records() -> list[r.Record]:
    s = Seq()
    tcp = {"provider": "tcp"}
    out: list[r.Record] = [
        r.TcpStateChange(**flow_a(s, 1000.0, probe="state-change", prev_state="CLOSED", state="SYN_SENT"), **tcp),
        r.TcpStateChange(**flow_a(s, 1001.0, probe="state-change", prev_state="SYN_SENT", state="ESTABLISHED"), **tcp),
        r.SiftrSample(**flow_a(s, 1002.0, probe="siftr", direction="out", srtt=150, snd_cwnd=14600), provider="siftr"),
        r.TcpDebugSnapshot(
            **flow_a(s, 1003.0, probe="debug-output", direction="output", state="ESTABLISHED"), provider="tcpdebug"
        ),
        r.TcpRetransmit(**flow_a(s, 1004.0, probe="retransmit", tcp_seq=5000), **tcp),
        r.TcpCongState(**flow_a(s, 1005.0, probe="cong-state", prev_ca_state="Open", ca_state="Loss"), **tcp),
        r.SkbEvent(**env("alpha", s, 1006.0, skb_uid=77, probe="m-rx", stage="rx-first"), provider="skb"),
        r.SkbEvent(**flow_a(s, 1007.0, probe="m-rx", stage="rx-deliver", skb_uid=77), provider="skb"),
        r.SkbDrop(
            **flow_a(s, 1008.0, probe="m-free", drop_reason=3, drop_reason_str="TCP_CSUM", skb_uid=78), provider="skb"
        ),
        r.TcpReset(**flow_a(s, 1009.0, probe="reset-received", sender="peer", state="ESTABLISHED"), **tcp),
        r.Alert(
            **flow_a(s, 1010.0, probe="alert", rule_id="K1", severity="warning", start=1010.0, message="reset"),
            provider="nettrail",
        ),
        r.TcpStateChange(
            **env(
                "alpha",
                s,
                2000.0,
                conn_uuid=CONN_B,
                src="10.0.0.2",
                sport=80,
                dst="10.0.0.3",
                dport=51000,
                pid=200,
                tgid=200,
                comm="nginx",
                uid=33,
                ctx="task",
            ),
            probe="state-change",
            prev_state="SYN_RECEIVED",
            state="ESTABLISHED",
            **tcp,
        ),
    ]
    for i in range(3):
        out.append(
            r.SkbDrop(
                **env(
                    "alpha",
                    s,
                    1500.0 + i,
                    skb_uid=90 + i,
                    probe="m-free",
                    drop_reason=2,
                    drop_reason_str="NO_SOCKET",
                    drop_location="nf+0x1",
                ),
                provider="skb",
            )
        )
    out.append(
        r.DropCount(
            **env(
                "alpha",
                s,
                1600.0,
                probe="drop-count",
                drop_reason_str="NO_SOCKET",
                drop_location="nf+0x1",
                count=10,
                delta=10,
            ),
            provider="skb",
        )
    )
    out.append(
        r.LossReport(
            **env("alpha", s, 1700.0, probe="loss", event_type="ringbuf", lost=5, lost_total=5), provider="nettrail"
        )
    )
    return out


def beta_records() -> list[r.Record]:
    s = Seq()
    c = {
        "conn_uuid": CONN_C,
        "src": "2001:db8::1",
        "sport": 5555,
        "dst": "2001:db8::2",
        "dport": 443,
        "pid": 300,
        "tgid": 300,
        "comm": "curl",
        "uid": 1000,
        "ctx": "task",
    }
    return [
        r.TcpStateChange(
            **env("beta", s, 3000.0, **c), provider="tcp", probe="state-change", prev_state="CLOSED", state="SYN_SENT"
        ),
        r.Alert(
            **env(
                "beta",
                s,
                3001.0,
                probe="alert",
                rule_id="P4",
                severity="critical",
                status="closed",
                start=3001.0,
                message="p4",
            ),
            provider="nettrail",
        ),
        r.LossReport(
            **env("beta", s, 3002.0, probe="loss", event_type="ringbuf", lost=2, lost_total=2), provider="nettrail"
        ),
    ]


def get_json(client: Client, url: str, expect: int = 200, **params: Any) -> Any:
    answer = client.get(url, params)
    assert answer.status_code == expect, answer.content[:300]
    return answer.json()
