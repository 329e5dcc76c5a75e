"""`nettrail collect --filter netns=INODE` keeps the events fired from timers: the
kernel-side filter takes the namespace from the socket, not from whatever task the
timer interrupted. Traffic: a connection in a namespace the test creates, its data
dropped by nftables until the kernel has made RTO retransmissions and entered the Loss state."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.collect_process import ROOT, Collector
from tests.kernel_support import bpf_skip_reason
from translators.records import TcpCongState, TcpRetransmit, from_json

pytestmark = pytest.mark.skipif(bpf_skip_reason() is not None, reason=bpf_skip_reason() or "")


@pytest.fixture
def netns():
    name = f"ntrto{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)  # takes its nft table along


def test_the_netns_filter_keeps_timer_retransmits_and_the_loss_state(netns, tmp_path):
    inode = os.stat(f"/run/netns/{netns}").st_ino
    out = tmp_path / "records.jsonl"
    with Collector("--providers", "tcp", "--filter", f"netns={inode}", "--out", str(out)) as c:
        c.wait_attached()
        sent = subprocess.run(
            ["ip", "netns", "exec", netns, sys.executable, str(ROOT / "tests" / "netns_rto.py"), "7600"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        time.sleep(0.3)
        status, _, err = c.stop()
    assert sent.returncode == 0, sent.stderr
    assert status == 0, err
    assert int(sent.stdout) == 20000
    records = [from_json(line) for line in out.read_bytes().splitlines()]
    assert records and {r.netns for r in records if r.netns is not None} == {inode}
    retrans = [r for r in records if isinstance(r, TcpRetransmit) and r.dport == 7600]
    rto = [r for r in retrans if r.retrans_kind == "rto"]
    assert len(rto) >= 2  # the sender's TCP_INFO saw the timer fire twice
    assert {r.netns for r in retrans} == {inode}
    loss = [r for r in records if isinstance(r, TcpCongState) and r.ca_state == "Loss" and r.dport == 7600]
    assert len(loss) >= 1 and {r.netns for r in loss} == {inode}
    # The sender sleeps through the blackout, so its timers fire on whatever task they
    # interrupt, mostly tasks of other namespaces: a filter on the current task's
    # namespace would drop them.
    syn = [r for r in records if isinstance(r, TcpRetransmit) and r.dport == 7601 and r.retrans_kind == "syn"]
    assert len(syn) >= 1 and {(r.netns, r.state) for r in syn} == {(inode, "SYN_SENT")}
