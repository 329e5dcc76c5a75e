"""Kernel rules on real traffic, the cases tests/test_alerts_kernel.py does not make:
K10 FIN_WAIT_2 past a short configured limit, K8 server half-open and the K2 SYN-ACK
retry share (nftables drops the clients' final handshake ACK), and K5's drop-based half
(a TCP_ZEROWINDOW drop). UDP SOCKET_RCVBUFF drops belong to K11, tested there.

One `nettrail collect --providers tcp,skb --alerts --rules FILE --out FILE.jsonl`
runs, filtered in the kernel to a network namespace this module creates, around
tests/alert_traffic_more.py; the alerts are read from the collector's own output, so the
live engine (heartbeat sweeps included) is what is tested.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.alert_kernel_support import KERNEL_ALERTS, namespace, netstat, nft_list, pick, split_alerts, stop
from tests.alert_traffic_more import FIN_WAIT2_PORT, SYNACK_PORT, ZEROWIN_PORT
from tests.collect_process import ROOT, Collector
from translators.records import Record, from_json

pytestmark = KERNEL_ALERTS

# Pure ACKs only (`flags == ack`): SYNs, RST|ACK and FIN|ACK pass, so handshakes start
# and the clients' closing RSTs reach the server.
NFT_TABLE = f"""
table inet ntalerts2 {{
  chain input {{
    type filter hook input priority 0; policy accept;
    tcp dport {SYNACK_PORT} tcp flags == ack counter drop
  }}
}}
"""
FIN_WAIT2_S = 2
HOLD_S = 5.0  # the half-closed socket's lifetime: well past FIN_WAIT2_S plus a sweep
RULES_TOML = f"""
[K10]
fin_wait2_s = {FIN_WAIT2_S}
sweep_s = 1
[K2]
synack_min_syns = 5
[K8]
synack_max = 5
"""


@pytest.fixture(scope="module")
def netns():
    with namespace(f"ntalerts2{os.getpid()}", NFT_TABLE, "ntalerts2") as ns:
        yield ns


@pytest.fixture(scope="module")
def recorded(netns, tmp_path_factory):
    """(records, final alert versions, what the traffic script did)."""
    name, inode = netns
    tmp = tmp_path_factory.mktemp("more")
    rules, out = tmp / "rules.toml", tmp / "out.jsonl"
    rules.write_text(RULES_TOML)
    col = Collector(
        "--providers", "tcp,skb", "--filter", f"netns={inode}", "--alerts", "--rules", str(rules),
        "--out", str(out), "--ringbuf-size", str(1 << 24), "--no-stack-counters",
    )  # fmt: skip
    try:
        col.wait_attached(timeout=120)
        traffic = subprocess.run(
            ["ip", "netns", "exec", name, sys.executable, str(ROOT / "tests" / "alert_traffic_more.py"), str(HOLD_S)],
            capture_output=True, text=True, timeout=60, cwd=ROOT,
        )  # fmt: skip
        assert traffic.returncode == 0 and "Traceback" not in traffic.stderr, traffic.stderr
        time.sleep(1.5)  # the last events reach the ring buffer; a heartbeat sweep after the close
    finally:
        code, _, err = stop(col, timeout=60)
    assert code == 0 and "events received" in err, err
    print(nft_list(name, "ntalerts2"))  # shown on failure: how many final ACKs were dropped
    assert netstat(name, "TCPZeroWindowDrop") == 1  # the kernel's own count of the K5 case
    recs: list[Record] = [from_json(line) for line in out.read_bytes().splitlines() if line.strip()]
    return (*split_alerts(recs), json.loads(traffic.stdout))


def test_a_half_close_the_peer_never_answers_raises_k10_fin_wait_2_past_the_configured_limit(recorded):
    recs, alerts, did = recorded
    port = did["fin_wait2_client_port"]
    entered = [
        r
        for r in recs
        if r.kind == "tcp_state" and r.state == "FIN_WAIT_2" and (r.sport, r.dport) == (port, FIN_WAIT2_PORT)
    ]
    [a] = pick(alerts, "K10", "fin-wait-2")
    assert (a.severity, a.src, a.sport, a.dst, a.dport) == ("notice", "127.0.0.1", port, "127.0.0.1", FIN_WAIT2_PORT)
    assert (a.pid, a.comm, a.proto, a.thresholds["fin_wait2_s"]) == (did["pid"], "python", "tcp", FIN_WAIT2_S)
    assert a.metric is not None and FIN_WAIT2_S <= a.metric < HOLD_S
    assert a.evidence == [entered[0].seq]
    assert "never sent its FIN" in a.message
    assert not pick(alerts, "K10", "close-wait")  # the server's CLOSE_WAIT stays under the default 60 s


def synack_retries(recs: list[Record]) -> list[Record]:
    return [r for r in recs if r.kind == "tcp_retransmit" and r.retrans_kind == "synack" and r.sport == SYNACK_PORT]


def evidence_from(retries: list[Record], distinct: int) -> list[int]:
    """The seqs of the retries from the one that makes `distinct` clients retried onwards."""
    seen: set[int | None] = set()
    out = []
    for r in retries:
        seen.add(r.dport)
        if len(seen) >= distinct:
            out.append(r.seq)
    return out


def test_dropped_final_acks_make_the_listener_resend_syn_acks_to_every_client(recorded):
    recs, _, did = recorded
    retries = synack_retries(recs)
    assert {r.dport for r in retries} == set(did["synack_clients"])
    assert all((r.state, r.src, r.dst) == ("SYN_RECEIVED", "127.0.0.1", "127.0.0.1") for r in retries)
    dropped = [
        r for r in recs if r.kind == "skb_drop" and r.drop_reason_str == "NETFILTER_DROP" and r.dport == SYNACK_PORT
    ]
    assert {r.sport for r in dropped} == set(did["synack_clients"])  # each client's final ACK
    server_established = [
        r for r in recs if r.kind == "tcp_state" and r.state == "ESTABLISHED" and r.sport == SYNACK_PORT
    ]
    assert server_established == []  # no handshake completed on the server


def test_syn_ack_retries_to_every_client_raise_the_k2_syn_ack_share(recorded):
    recs, alerts, did = recorded
    [a] = pick(alerts, "K2", "synack-share")
    assert (a.severity, a.src, a.sport, a.dst, a.dport, a.comm) == (
        "warning",
        "127.0.0.1",
        SYNACK_PORT,
        None,
        None,
        "python",
    )
    assert a.metric == 1.0  # 10 of 10 clients, none completed
    assert (a.thresholds["synack_min_syns"], a.thresholds["synack_share"]) == (5, 0.05)
    assert a.evidence == evidence_from(synack_retries(recs), 5)
    assert a.count == len(a.evidence)
    assert "to 10 of about 10 connecting clients (100%)" in a.message


def test_syn_ack_retries_to_more_clients_than_the_limit_raise_k8_server_half_open(recorded):
    recs, alerts, did = recorded
    [a] = pick(alerts, "K8", "server-half-open")
    assert (a.severity, a.src, a.sport, a.dst, a.dport, a.comm) == (
        "warning",
        "127.0.0.1",
        SYNACK_PORT,
        None,
        None,
        "python",
    )
    assert a.metric == 10.0
    assert a.thresholds["synack_max"] == 5
    assert a.evidence == evidence_from(synack_retries(recs), 6)
    assert "retrying SYN-ACKs to 10 clients" in a.message


def test_data_into_a_closed_receive_window_raises_a_k5_tcp_zerowindow_drop_warning(recorded):
    recs, alerts, did = recorded
    client = did["zerowin_client_port"]
    assert did["zerowin_received"] == 100  # the retransmission got through once the window reopened
    drops = [r for r in recs if r.kind == "skb_drop" and r.drop_reason_str == "TCP_ZEROWINDOW"]
    assert [(r.sport, r.dport) for r in drops] == [(client, ZEROWIN_PORT)]
    [a] = pick(alerts, "K5", "tcp-zerowindow")
    # the drop names the segment: the sending client first, the receiving socket second
    assert (a.severity, a.src, a.sport, a.dst, a.dport) == ("warning", "127.0.0.1", client, "127.0.0.1", ZEROWIN_PORT)
    assert (a.metric, a.count, a.evidence, a.pid) == (1.0, 1, [drops[0].seq], did["pid"])
    assert "1 TCP_ZEROWINDOW drop in 10 s" in a.message
