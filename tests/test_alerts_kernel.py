"""Kernel rules on real traffic: `nettrail collect` records real loopback traffic in a
network namespace this module creates, and the file goes through the rule engine.

Faults (tests/alert_traffic.py faults): nftables loss (10 % on one port, a 3 s
blackout on another), queueing behind a tc token bucket, a closed-port storm, SYNs into a drop rule, a backlog-1 listener
that never accepts, a receiver that never reads, a socket left in CLOSE_WAIT. Clean
traffic (`clean`): a bulk transfer, 200 short request/response connections and an idle
keep-alive connection, which must raise no alert at all.

K4 has no test here: on Linux 6.18 an accept-queue overflow (provoked with a backlog-1
listener, counted in ListenOverflows) produces no skb drop with reason
TCP_LISTEN_OVERFLOW; the collector reports the ListenOverflows counter of every network
namespace as stack_counter records: tests/test_collect_alerts.py runs a collector inside a
test namespace, tests/test_stack_counters_kernel.py one outside two flooded namespaces. The drop-based half of K5 (a TCP_ZEROWINDOW drop), K8's server half-open, K2's SYN-ACK share
and K10's FIN_WAIT_2 are in tests/test_alerts_kernel_more.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.alerts.config import config_from_mapping
from analysis.alerts.engine import run
from tests.alert_kernel_support import KERNEL_ALERTS, final, namespace, nft_list, pick, stop
from tests.alert_kernel_support import netstat as ns_netstat
from tests.collect_process import ROOT, Collector
from tests.kernel_support import snmp_tcp
from translators.records import Alert, Record, from_json

pytestmark = KERNEL_ALERTS

# Drops on the input hook: a drop on the sender's output hook is reported back to TCP
# as a local send error (the segment just waits in the queue), not as loss.
NFT_TABLE = """
table inet ntalerts {
  set blackout { type inet_service; }
  chain input {
    type filter hook input priority 0; policy accept;
    tcp dport 7600 numgen random mod 100 < 10 counter drop
    tcp dport 7300 counter drop
    tcp dport @blackout counter drop
  }
}
"""
# Short timeouts so the test does not wait a minute for CLOSE_WAIT (configurable rules).
RULES = {"K8": {"syn_sent_s": 1.5}, "K10": {"close_wait_s": 2, "sweep_s": 1}}


@pytest.fixture(scope="module")
def netns():
    with namespace(f"ntalerts{os.getpid()}", NFT_TABLE, "ntalerts") as ns:
        yield ns


def tcp_timeouts(netns) -> int:
    return ns_netstat(netns[0], "TCPTimeouts")


# Three collectors, merged by kernel time: the tcp provider unfiltered (its records are
# kept by their netns field; the in-kernel netns filter keeps timer-fired events too,
# tests/test_collect_netns_filter.py), siftr and skb/udp filtered to the
# namespace in the kernel (their volume from the rest of this busy host would be large).
COLLECTORS = (("tcp", False), ("siftr", True), ("skb,udp", True))


def record(netns, scenario: str, path: Path) -> list[Record]:
    name, inode = netns
    cols = []
    for providers, filtered in COLLECTORS:
        out = path.with_name(f"{path.stem}-{providers.replace(',', '-')}.jsonl")
        extra = ["--filter", f"netns={inode}"] if filtered else []
        cols.append(
            (Collector("--providers", providers, "--out", str(out), "--ringbuf-size", str(1 << 24), *extra), out)
        )
    try:
        for col, _ in cols:
            col.wait_attached(timeout=120)
        traffic = subprocess.run(
            ["ip", "netns", "exec", name, sys.executable, str(ROOT / "tests" / "alert_traffic.py"), scenario],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
        assert traffic.returncode == 0 and "Traceback" not in traffic.stderr, traffic.stderr
        time.sleep(0.5)  # let the last events reach the ring buffers
    finally:
        results = [stop(col) for col, _ in cols]
    for code, _, err in results:
        assert code == 0 and "events received" in err, err
    recs = [from_json(line) for _, out in cols for line in out.read_bytes().splitlines() if line.strip()]
    recs = [r for r in recs if r.netns == inode or r.kind in ("loss_report", "drop_count")]
    recs.sort(key=lambda r: r.ts_ns)
    return recs


@pytest.fixture(scope="module")
def faults(netns, tmp_path_factory):
    recs = record(netns, "faults", tmp_path_factory.mktemp("faults") / "faults.jsonl")
    print(nft_list(netns[0], "ntalerts"))  # shown on failure: how many packets each fault rule dropped
    alerts = [r for r in run(iter(recs), config_from_mapping(RULES)) if isinstance(r, Alert)]
    return recs, final(alerts)


def test_a_closed_port_storm_raises_a_k3_reset_volume_alert_naming_the_kernel_port(faults):
    recs, alerts = faults
    [a] = pick(alerts, "K3", "volume", sport=9, src="127.0.0.1")
    resets = [
        r for r in recs if r.kind == "tcp_reset" and r.sender == "local" and r.sport == 9 and r.src == "127.0.0.1"
    ]
    assert len(resets) == 25
    assert (a.severity, a.metric, a.count, a.src, a.pid) == ("warning", 25.0, 15, "127.0.0.1", None)
    assert a.evidence == [r.seq for r in resets]
    assert "25 replies to segments for a closed port (no listener)" in a.message


def test_refused_connects_raise_k14_critical_and_k3_peer_share(faults):
    recs, alerts = faults
    [a] = pick(alerts, "K14", "connect-failures", dport=9, dst="127.0.0.1")
    assert (a.severity, a.metric, a.dst) == ("critical", 1.0, "127.0.0.1")
    assert "25 of 25 connection attempts" in a.message and "25 refused by RST" in a.message
    [p] = pick(alerts, "K3", "peer-share", dport=9, dst="127.0.0.1")
    assert (p.severity, p.metric) == ("warning", 1.0)


def test_failures_on_many_ports_raise_a_k9_port_scan(faults):
    _, alerts = faults
    [a] = pick(alerts, "K9", "port-scan")
    assert (a.severity, a.src, a.dst, a.proto) == ("warning", "127.0.0.1", "127.0.0.1", "tcp")
    # refused on 9 and 9001-9015, timed out on 7300 (SYNs dropped) and 7400 (full backlog):
    # exactly 18. A client that gives up on the backlog-1 listener in SYN_SENT may still get
    # that listener's SYN-ACK retry; the RST its closed port answers with is a straggler of
    # that connection, not a failed attempt on one more port (it once made this 20).
    assert a.metric == 18.0
    assert "18 distinct ports of 127.0.0.1" in a.message


def test_hundreds_of_refused_connects_in_a_minute_raise_a_k9_syn_scan(faults):
    recs, alerts = faults
    [a] = pick(alerts, "K9", "syn-scan")
    opened = [r for r in recs if r.kind == "tcp_state" and (r.prev_state, r.state) == ("CLOSED", "SYN_SENT")]
    assert len(opened) > 270
    assert (a.severity, a.proto) == ("warning", "tcp")
    assert a.metric is not None and a.metric > 256
    assert "completed a handshake" in a.message


def test_syns_into_a_drop_rule_raise_k2_syn_retry_and_k8_stuck_and_timeout(faults):
    _, alerts = faults
    [retry] = pick(alerts, "K2", "syn-retry", dport=7300)
    assert (retry.severity, retry.comm) == ("notice", "python")
    assert retry.metric is not None and retry.metric >= 1
    [stuck] = pick(alerts, "K8", "syn-sent", dport=7300)
    # one finding for the destination: its metric is the stuck sockets, each one a member
    assert stuck.severity == "notice" and stuck.members is not None and stuck.metric == float(stuck.members) >= 1
    assert len(stuck.member_conn_uuids) == stuck.members
    [gave_up] = pick(alerts, "K8", "connect-timeout", dport=7300)
    assert gave_up.metric is not None and 2.0 < gave_up.metric < 4.0


def test_a_full_accept_queue_makes_clients_retry_their_syns(faults):
    _, alerts = faults
    retried = pick(alerts, "K2", "syn-retry", dport=7400)
    assert len(retried) >= 1 and {a.severity for a in retried} == {"notice"}


def test_a_receiver_that_never_reads_raises_k5_and_the_sender_k13(faults):
    _, alerts = faults
    [k5] = pick(alerts, "K5", "zero-window", sport=7500)  # local side first: the receiver's socket
    assert k5.severity == "warning" and k5.metric is not None and k5.metric >= 1.0
    [k13] = pick(alerts, "K13", "zero-window", dport=7500)  # the sender, its peer on 7500
    assert k13.severity == "warning" and k13.metric is not None and k13.metric >= 1.0


def test_ten_percent_loss_raises_k1_on_that_connection(faults):
    recs, alerts = faults
    [a] = pick(alerts, "K1", "ratio", dport=7600)
    assert a.severity in ("warning", "critical") and a.metric is not None and a.metric > 0.02
    retrans = {r.seq for r in recs if r.kind == "tcp_retransmit" and r.dport == 7600}
    assert set(a.evidence) <= retrans and len(a.evidence) >= 10


def test_a_blackout_raises_k2_rto_warning_and_k6_cwnd_collapse(faults):
    _, alerts = faults
    [rto] = pick(alerts, "K2", "rto", dport=7700)
    assert rto.severity == "warning" and rto.metric is not None and rto.metric >= 3
    [cwnd] = pick(alerts, "K6", "collapse", dport=7700)
    assert cwnd.severity == "warning" and "collapsed to" in cwnd.message


def test_a_udp_receiver_that_never_reads_raises_k11_rcvbuf(faults):
    recs, alerts = faults
    [a] = pick(alerts, "K11", "rcvbuf", sport=7010)
    drops = [r for r in recs if r.kind == "skb_drop" and r.drop_reason_str == "SOCKET_RCVBUFF" and r.dport == 7010]
    assert len(drops) >= 150  # of 200 datagrams into a 1 KiB buffer
    assert (a.severity, a.proto, a.src) == ("warning", "udp", "127.0.0.1")
    assert "because its receive buffer was full" in a.message


def test_udp_to_a_closed_port_raises_k11_no_socket(faults):
    recs, alerts = faults
    [a] = pick(alerts, "K11", "no-socket", dport=7011)
    drops = [r for r in recs if r.kind == "skb_drop" and r.drop_reason_str == "NO_SOCKET" and r.dport == 7011]
    assert len(drops) == 120
    assert (a.severity, a.metric, a.count) == ("notice", 120.0, 20)


def test_nftables_drops_raise_k12_netfilter_notices_per_flow(faults):
    recs, alerts = faults
    dropped = {r.dport for r in recs if r.kind == "skb_drop" and r.drop_reason_str == "NETFILTER_DROP"}
    assert {7300, 7600, 7700} <= dropped
    flagged = {a.dport for a in pick(alerts, "K12", "netfilter_drop")}
    assert {7300, 7600, 7700} <= flagged
    assert {a.severity for a in pick(alerts, "K12", "netfilter_drop")} == {"notice"}


def test_queueing_behind_a_token_bucket_raises_a_k7_srtt_spike_against_the_destinations_baseline(faults):
    recs, alerts = faults
    [a] = pick(alerts, "K7", "spike", dport=7200)
    samples = [r.srtt for r in recs if r.kind == "siftr_sample" and r.dport == 7200 and r.srtt]
    assert min(samples) < 1000 and max(samples) > 200_000  # µs: a loopback baseline, then a queue
    # critical: a sample went over baseline + 200 ms; the final version's metric is the
    # srtt of its last firing, which may be taken as the queue drains (seen: 112 ms)
    assert a.severity == "critical" and a.metric in samples and a.metric > 5_000
    baseline_ms = float(
        re.search(r"against the baseline of ([0-9.]+) ms of connections to 127.0.0.0/24 port 7200", a.message).group(1)
    )
    assert baseline_ms < 5  # the ping-pong phase: loopback round trips


def test_a_socket_left_in_close_wait_raises_k10_with_a_short_configured_timeout(faults):
    recs, alerts = faults
    # one finding for the process (issue 34 item 1), whichever of its sockets sit in
    # CLOSE_WAIT; the one on 7100 is among its members
    [a] = [x for x in pick(alerts, "K10", "close-wait") if x.comm == "python"]
    assert (a.severity, a.thresholds["close_wait_s"]) == ("notice", 2)
    [cw] = [r for r in recs if r.kind == "tcp_state" and r.state == "CLOSE_WAIT" and r.sport == 7100]
    assert cw.conn_uuid in a.member_conn_uuids
    assert a.members is not None and a.members >= 1 and a.metric == float(a.members)
    assert a.message.startswith(f"python (pid {a.tgid}) ")


def test_a_collector_with_a_tiny_ring_buffer_reports_its_loss_as_a_critical_h1(netns, tmp_path):
    name, inode = netns
    path = tmp_path / "lossy.jsonl"
    col = Collector(
        "--providers", "siftr", "--out", str(path), "--filter", f"netns={inode}", "--ringbuf-size", "4096"
    )  # fmt: skip
    try:
        col.wait_attached(timeout=120)
        subprocess.run(
            ["ip", "netns", "exec", name, sys.executable, str(ROOT / "tests" / "alert_traffic.py"), "burst"],
            capture_output=True, text=True, timeout=60, check=True, cwd=ROOT,
        )  # fmt: skip
        time.sleep(0.5)
    finally:
        code, _, err = stop(col)
    assert code == 0, err
    recs = [from_json(line) for line in path.read_bytes().splitlines() if line.strip()]
    losses = [r for r in recs if r.kind == "loss_report" and r.lost > 0 and r.event_type == "siftr_sample"]
    assert losses, err  # a 4 KiB ring cannot hold a loopback bulk transfer's samples
    alerts = final([r for r in run(iter(recs), config_from_mapping({})) if isinstance(r, Alert)])
    # one H1 alert per event type that lost events; the samples are the ones that must
    [h1] = [a for a in alerts if a.rule_id == "H1" and "siftr_sample events" in a.message]
    assert (h1.condition, h1.severity, h1.host_id, h1.src) == ("lost-events", "critical", recs[0].host_id, None)
    assert h1.evidence == [r.seq for r in losses][:32]
    assert f"{losses[-1].lost_total} since it started" in h1.message
    assert all(a.incomplete for a in alerts if a.rule_id != "H1" and a.end and a.end >= losses[0].ts_wall - 10)


def test_clean_bulk_request_response_and_keepalive_traffic_raises_no_alert(netns, tmp_path):
    timeouts, retrans = tcp_timeouts(netns), snmp_tcp("RetransSegs", netns[0])
    recs = record(netns, "clean", tmp_path / "clean.jsonl")
    timeouts, retrans = tcp_timeouts(netns) - timeouts, snmp_tcp("RetransSegs", netns[0]) - retrans
    kinds = {r.kind for r in recs}
    assert {"tcp_state", "siftr_sample"} <= kinds
    established = [r for r in recs if r.kind == "tcp_state" and r.state == "ESTABLISHED" and r.dport == 7900]
    assert len(established) == 200
    alerts = [r for r in run(iter(recs), config_from_mapping({})) if isinstance(r, Alert)]
    lost = [r for r in recs if r.kind == "loss_report" and r.lost > 0]
    # On this shared 2-core machine the kernel itself may time out (a starved receiver);
    # then an RTO alert and the cwnd collapse after it are true; so is a retransmission-rate
    # alert once the kernel retransmitted K1's floor of 10 (tail loss probes under load).
    # Nothing else may fire, and collector loss is itself an alert (H1).
    allowed = {"H1"} | ({"K2/rto", "K6/collapse"} if timeouts else set()) | ({"K1"} if retrans >= 10 else set())
    unexpected = [
        f"{a.rule_id}/{a.condition} {a.sport}->{a.dport}: {a.message}"
        for a in alerts
        if a.rule_id not in allowed and f"{a.rule_id}/{a.condition}" not in allowed
    ]
    assert unexpected == [], f"kernel TCPTimeouts in the run: {timeouts}, RetransSegs: {retrans}"
    assert bool([a for a in alerts if a.rule_id == "H1"]) == bool(lost)
    # The issue-8 gap rules with the short thresholds of tests/test_alerts_kernel_gaps.py:
    # the idle keep-alive connection (4 s, probes every second) ends without a reset, the
    # 200 short connections pass through CLOSE_WAIT for microseconds, nothing is dropped
    # by policy: none of them may fire on the same clean records.
    short = config_from_mapping(
        {
            "K3": {"idle_reset_s": 2},
            "K10": {"sweep_s": 1, "close_wait_growth_s": 3},
            "K12": {"policy_window_s": 2, "policy_baseline_s": 4},
        }
    )
    gap_conditions = {"K3/idle-reset", "K10/close-wait-growth", "K10/time-wait", "K12/policy-rate-change"}
    fired = {f"{a.rule_id}/{a.condition}" for a in run(iter(recs), short) if isinstance(a, Alert)}
    assert fired & gap_conditions == set()
