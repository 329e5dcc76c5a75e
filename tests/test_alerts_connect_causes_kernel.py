"""Issue 34 item 2 on real sockets: why a connect failed, one K14 finding per destination,
each cause with its numbers checked against the kernel's own counters.

Two namespaces joined by a veth pair; the client's namespace (tcp_syn_retries 1) makes five
connects to each of four destinations:
- refused: nothing listens on the server's port: its RSTs = the server's TcpOutRsts;
- dropped here: an nftables rule in the client's own output: its SYNs = that rule's counter;
- dropped at the server: an nftables rule in the server's input (another namespace of this
  host, the drop carries only the tuple): its SYNs = that rule's counter;
- unanswered: a route into a tun device nobody reads (the SYNs leave and nothing answers):
  its SYNs = those read from the device afterwards.
One `nettrail collect --providers tcp,skb --alerts` filtered to the client's address runs
around it. The failed total = the client's TcpAttemptFails. About 20 s.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from tests.alert_kernel_support import KERNEL_ALERTS, stop
from tests.collect_process import Collector
from tests.kernel_support import free_port
from tests.tun_lab import _open_tun
from tests.veth_lab import in_netns, veth_lab
from translators.records import Alert, from_json

pytestmark = KERNEL_ALERTS
N = 5
RULES = "[K14]\nmin_attempts = 5\n[engine]\nupdate_interval_s = 1\n"
LOST = "10.203.7.7"  # routed into the tun device: nothing ever answers
TUN = "ntcctun"


def ns_run(ns: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["ip", "netns", "exec", ns, *args], input=stdin, capture_output=True, text=True, check=True)
    return done.stdout


def nft_drop(ns: str, hook: str, port: int) -> None:
    ns_run(ns, "nft", "-f", "-", stdin=f"table inet ntcc {{\n chain c {{\n type filter hook {hook} priority 0;\n"
           f" tcp dport {port} counter drop;\n }}\n}}\n")  # fmt: skip


def nft_packets(ns: str) -> int:
    out = ns_run(ns, "nft", "list", "table", "inet", "ntcc")
    return int(out.split("counter packets ")[1].split()[0])


def snmp(ns: str, name: str) -> int:
    for line in ns_run(ns, "nstat", "-az", name).splitlines()[1:]:
        return int(line.split()[1])
    raise AssertionError(f"no {name}")


def syns_queued(fd: int, dst: str, port: int) -> int:
    """The SYNs to dst:port waiting in the tun device's queue (IPv4, no packet info header)."""
    os.set_blocking(fd, False)
    n = 0
    while True:
        try:
            pkt = os.read(fd, 65536)
        except BlockingIOError:
            return n
        ihl = (pkt[0] & 0x0F) * 4
        if pkt[9] == 6 and socket.inet_ntoa(pkt[16:20]) == dst and int.from_bytes(pkt[ihl + 2 : ihl + 4]) == port:
            n += pkt[ihl + 13] & 0x12 == 0x02  # SYN without ACK


def test_each_failed_destination_is_one_k14_finding_that_says_why_with_the_kernels_numbers(tmp_path: Path) -> None:
    rules, out = tmp_path / "rules.toml", tmp_path / "out.jsonl"
    rules.write_text(RULES)
    refused, here, there, lost = (free_port() for _ in range(4))
    with veth_lab(gro=False) as lab:
        ns_run(lab.a, "sysctl", "-qw", "net.ipv4.tcp_syn_retries=1")
        inode_a = os.stat(f"/run/netns/{lab.a}").st_ino
        tun = in_netns(lab.a, lambda: _open_tun(TUN))  # never read: what it is sent stays unanswered
        ns_run(lab.a, "ip", "link", "set", TUN, "up")
        ns_run(lab.a, "ip", "route", "add", "10.203.7.0/24", "dev", TUN, "src", lab.addr_a)
        nft_drop(lab.a, "output", here)
        nft_drop(lab.b, "input", there)
        col = Collector(
            "--providers", "tcp,skb", "--filter", f"addr={lab.addr_a}", "--alerts", "--rules", str(rules),
            "--out", str(out),
        )  # fmt: skip
        clients: list[socket.socket] = []
        try:
            col.wait_attached(timeout=120)
            time.sleep(1.0)
            fails_before = snmp(lab.a, "TcpAttemptFails")
            for dst, port in ((lab.addr_b, refused), (lab.addr_b, here), (lab.addr_b, there), (LOST, lost)):
                for _ in range(N):
                    c = in_netns(lab.a, socket.socket)
                    c.setblocking(False)
                    c.connect_ex((dst, port))
                    clients.append(c)
            time.sleep(6.0)  # every attempt gave up: SYN, retry at 1 s, give-up at 3 s
            fails = snmp(lab.a, "TcpAttemptFails") - fails_before
            rsts = snmp(lab.b, "TcpOutRsts")
            dropped_here, dropped_there = nft_packets(lab.a), nft_packets(lab.b)
            sent_lost = syns_queued(tun, LOST, lost)
        finally:
            code, _, err = stop(col, timeout=60)
            for c in clients:
                c.close()
            ns_run(lab.a, "nft", "delete", "table", "inet", "ntcc")
            ns_run(lab.b, "nft", "delete", "table", "inet", "ntcc")
            os.close(tun)  # the device goes with its descriptor
    assert code == 0, err
    assert fails == 4 * N and rsts == N
    alerts = [r for r in map(from_json, out.read_bytes().splitlines()) if isinstance(r, Alert)]
    k14 = {a.dport: a for a in alerts if a.rule_id == "K14" and a.dport in (refused, here, there, lost)}
    assert set(k14) == {refused, here, there, lost}
    assert len({a.alert_id for a in alerts if a.rule_id == "K14" and a.dport == refused}) == 1

    def head(dst: str, port: int, refused_n: int, timed_out: int) -> str:
        return (
            f"{N} of {N} connection attempts to {dst}:{port} failed in 60 s (100%: {refused_n} refused by RST, "
            f"{timed_out} timed out, 0 reset before any data): clients of this service see errors. Why: "
        )

    assert k14[refused].message == head(lab.addr_b, refused, rsts, 0) + (
        f"{rsts} refused: {lab.addr_b} answered the SYN with a RST (nothing listens on {lab.addr_b}:{refused}, or a "
        f"firewall there rejects it)."
    )
    assert k14[here].message == head(lab.addr_b, here, 0, N) + (
        f"{N} timed out with every SYN dropped on this host: NETFILTER_DROP at nft_do_chain in network namespace "
        f"{inode_a} ({dropped_here})."
    )
    assert k14[there].message == head(lab.addr_b, there, 0, N) + (
        f"{N} timed out with every SYN dropped on this host: NETFILTER_DROP at nft_do_chain in network namespace "
        f"{lab.netns_b} ({dropped_there})."
    )
    assert k14[lost].message == head(LOST, lost, 0, N) + (
        f"{N} timed out with {sent_lost} SYNs sent and none answered: dropped upstream, or {LOST} is down or gone."
    )
    assert all(a.severity == "critical" and a.metric == 1.0 for a in k14.values())
    # K8's connect timeouts say the same: dropped here with the reason, else the peer or the path
    k8 = {a.dport: a for a in alerts if a.rule_id == "K8" and a.condition == "connect-timeout"}
    assert k8[here].message.endswith(
        f"connect timeouts, the latest one's {dropped_here // N} SYNs were all dropped on this host: NETFILTER_DROP at "
        f"nft_do_chain in network namespace {inode_a} ({dropped_here // N})."
    )
    assert k8[lost].message.endswith("connect timeouts, the peer or the path is dropping SYNs.")
