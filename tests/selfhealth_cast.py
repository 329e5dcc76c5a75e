"""Tracer self-health records of one collector run, for the status page's tests
(tests/test_dashboard_status_api.py, tests/browser/test_dashboard_status.py): the
collector_status the collector builds (collector.health.coverage, with tcp_cong_state_set
absent), collector_stats whose middle interval is over the CPU budget and the H4 alert
the real rule engine raises for it, a ppl 4 sampling report, a ring-buffer loss, and one
SIFTR-sampled connection whose flow_counters give its sampling windows.
Keep in sync with: translators/records.py, the expected values below.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec

from analysis.alerts.config import config_from_mapping
from analysis.alerts.engine import RuleEngine
from collector.bpf import loader
from collector.health.coverage import WATCHED_DROP_REASONS, collector_status
from translators.kernel import KernelEnv
from translators.records import (
    CollectorStats,
    FlowCounters,
    LossReport,
    Record,
    SamplingReport,
    SiftrSample,
    TcpStateChange,
    connection_uuid,
)

BOOT = "boot-selfhealth"
T0 = 1_700_000_000.0
PID = 4321
COOKIE = 77
PROVIDERS = ("tcp", "siftr")
ABSENT = ["tcp_cong_state_set"]
ATTACHED = {
    name: 900 + i
    for i, name in enumerate(n for n, needed in loader.PROGRAMS.items() if needed & set(PROVIDERS) and n not in ABSENT)
}
CPU = [2.0, 7.5, 3.0]  # percent of one CPU per 10 s interval: the middle one is over 5 %
# the connection's flow_counters: (packets_in, packets_out, samples) -> windows of 8.0 and 4.0
COUNTS = [(400, 400, 100), (600, 600, 200)]


def conn_uuid(host: str) -> str:
    return connection_uuid(host, BOOT, COOKIE)


def _env(host: str, seq: int, dt: float, provider: str, probe: str, **kw: Any) -> dict[str, Any]:
    return {"host_id": host, "boot_id": BOOT, "seq": seq, "ts_ns": int((T0 + dt) * 1e9), "ts_wall": T0 + dt,
            "provider": provider, "probe": probe, **kw}  # fmt: skip


def records(host: str) -> list[Record]:
    seq = itertools.count(1)
    status = collector_status(
        KernelEnv(host_id=host, boot_id=BOOT, wall_offset=0.0), PROVIDERS, ATTACHED, ABSENT, {},
        WATCHED_DROP_REASONS, stack_counters=True, ppl=4, ip_sample=0, drop_rate=0,
    )  # fmt: skip
    env = _env(host, next(seq), 0, "nettrail", "status", pid=PID, tgid=PID, comm="nettrail")
    out: list[Record] = [msgspec.structs.replace(status, **env, kernel_release="6.18.44-test")]
    total = 0.0
    for i, cpu in enumerate(CPU):
        total += cpu / 10
        out.append(
            CollectorStats(
                **_env(host, next(seq), 10 * (i + 1), "nettrail", "stats", pid=PID, tgid=PID, comm="nettrail"),
                interval_s=10.0,
                cpu_time_s=cpu / 10,
                cpu_total_s=round(total, 6),
                cpu_percent=cpu,
                events=4000 * (i + 1),
                events_per_s=400.0 * (i + 1),
                records=4000 * (i + 1),
                events_by_type={"siftr_sample": 4000 * (i + 1)},
                rss_bytes=90_000_000,
            )  # fmt: skip
        )
    out.append(
        SamplingReport(
            **_env(host, next(seq), 20, "nettrail", "sampling"),
            event_type="siftr_sample",
            setting="ppl 4",
            window_s=1.0,
            observed=4000,
            emitted=1000,
            ratio=4.0,
        )  # fmt: skip
    )
    out.append(LossReport(**_env(host, next(seq), 21, "nettrail", "loss"), event_type="siftr_sample", lost=3,
                          lost_total=3, received_total=10_000))  # fmt: skip
    flow = {"conn_uuid": conn_uuid(host), "sock_cookie": COOKIE, "ip_ver": 4, "src": "10.9.0.1", "sport": 40000,
            "dst": "10.9.0.2", "dport": 443}  # fmt: skip
    out.append(TcpStateChange(**_env(host, next(seq), 1, "tcp", "state-change", **flow), prev_state="SYN_SENT",
                              state="ESTABLISHED"))  # fmt: skip
    for k in range(20):
        out.append(SiftrSample(**_env(host, next(seq), 1 + k * 0.1, "siftr", "siftr", **flow), direction="in",
                               snd_cwnd=(10 + k) * 1448, srtt=2000 + 50 * k, mss=1448))  # fmt: skip
    for k, (pin, pout, samples) in enumerate(COUNTS):
        out.append(FlowCounters(**_env(host, next(seq), 2 + k, "siftr", "flow-counters", **flow), proto="tcp",
                                packets_in=pin, packets_out=pout, samples=samples))  # fmt: skip
    engine = RuleEngine(config_from_mapping({}), seq_base=1 << 62)
    alerts = [a for r in out for a in engine.feed(r) if a.rule_id == "H4"]
    assert len(alerts) == 1, alerts  # the 7.5 % interval
    return out + alerts
