"""Issue 34 item 2 on real sockets: a path-MTU black hole is one K2 `pmtu-black-hole` finding
for the path, whose numbers are the kernel's own: the packets dropped as PKT_TOO_BIG = the
router namespace's IpFragFails (`nstat -az` there), the ICMP errors dropped = the nftables
rule's counter, the connection and its retransmits = the collector's records.

tests/router_lab.py: client -- router -- server namespaces, the router's link to the server
with MTU 1280 and an nftables rule in the router dropping its ICMP "fragmentation needed".
The client first sends 1,000 bytes (they fit and are acknowledged), then 20,000 that never
pass. One `nettrail collect --providers tcp,siftr,skb --ppl 1 --alerts`, filtered to the
client's address, runs around it; its own output is read back. About 15 s.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

from tests.alert_kernel_support import KERNEL_ALERTS, pick, split_alerts, stop
from tests.collect_process import Collector
from tests.router_lab import router_lab
from translators.records import SkbDrop, TcpRetransmit, from_json

pytestmark = KERNEL_ALERTS
RULES = "[engine]\nupdate_interval_s = 1\n"
FIRST = 1000  # bytes that fit through the 1280-byte link


def nstat(ns: str) -> dict[str, int]:
    """The namespace's counters as `nstat -az` prints them (absolute, zeros too)."""
    out = subprocess.run(["ip", "netns", "exec", ns, "nstat", "-az"], capture_output=True, text=True, check=True)
    return {line.split()[0]: int(line.split()[1]) for line in out.stdout.splitlines()[1:]}


def test_a_path_mtu_black_hole_is_one_finding_with_the_routers_ipfragfails_and_the_nft_counter(
    tmp_path: Path,
) -> None:
    rules, out = tmp_path / "rules.toml", tmp_path / "out.jsonl"
    rules.write_text(RULES)
    with router_lab() as lab:
        col = Collector(
            "--providers", "tcp,siftr,skb", "--ppl", "1", "--filter", f"addr={lab.client_addr}", "--alerts",
            "--rules", str(rules), "--out", str(out),
        )  # fmt: skip
        lst = lab.socket(lab.server)
        lst.bind((lab.server_addr, 0))
        lst.listen()
        port = lst.getsockname()[1]
        client = lab.socket(lab.client)
        try:
            col.wait_attached(timeout=120)
            time.sleep(1.5)  # the stack counters' baseline of the namespaces
            client.connect((lab.server_addr, port))
            server, _ = lst.accept()
            client.sendall(b"x" * FIRST)
            got = b""
            while len(got) < FIRST:
                got += server.recv(FIRST)
            time.sleep(0.2)  # the acknowledgment is back
            threading.Thread(target=lambda: client.sendall(b"y" * 20000), daemon=True).start()
            time.sleep(8.0)  # the first burst and about five timeouts' retransmits into the hole
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            local = client.getsockname()
            client.close()  # an abort: nothing more into the hole
            time.sleep(2.5)  # the router's counters read once more
            counters, icmp_dropped = nstat(lab.router), lab.icmp_dropped()
        finally:
            code, _, err = stop(col, timeout=60)
            client.close()
            lst.close()
    assert code == 0, err
    records, alerts = split_alerts([from_json(line) for line in out.read_bytes().splitlines()])
    frag_fails = counters["IpFragFails"]
    drops = [r for r in records if isinstance(r, SkbDrop) and r.drop_reason_str == "PKT_TOO_BIG"]
    assert len(drops) == frag_fails >= 3
    assert icmp_dropped >= 1
    found = pick(alerts, "K2", "pmtu-black-hole")
    assert len(found) == 1  # one finding for the path
    a = found[0]
    tuple_of = (lab.client_addr, local[1], lab.server_addr, port)
    retrans = [r for r in records if isinstance(r, TcpRetransmit) and (r.src, r.sport, r.dst, r.dport) == tuple_of]
    counted = sum(r.segs or 1 for r in retrans if r.tcp_payload_len and r.ts_wall >= drops[0].ts_wall)
    size = max(r.tcp_payload_len // (r.segs or 1) for r in retrans if r.tcp_payload_len)
    conn = next(r.conn_uuid for r in retrans)
    small, large = min(r.len or 0 for r in drops), max(r.len or 0 for r in drops)
    sizes = f"{small}" if small == large else f"{small} to {large}"
    comm, pid = Path("/proc/self/comm").read_text().strip(), os.getpid()
    assert (a.severity, a.metric, a.count, a.members, a.member_conn_uuids) == (
        "critical", float(frag_fails), frag_fails, 1, [conn]
    )  # fmt: skip
    assert (a.src, a.dst, a.dport, a.netns) == (lab.client_addr, lab.server_addr, port, lab.router_inode)
    assert small == 1500 and size == 1448
    assert a.message == (
        f"Path-MTU black hole toward {lab.server_addr}: the forwarding hop in network namespace {lab.router_inode} "
        f"({lab.router}) on this host dropped {frag_fails} packets of {sizes} bytes as PKT_TOO_BIG (larger than its "
        f"next link's MTU, with Don't Fragment set); it counted {frag_fails} IpFragFails meanwhile ({frag_fails} "
        f'since it was created, as nstat -a reads them). Its ICMP errors ("fragmentation needed") never reached the '
        f"sender {lab.client_addr}: {icmp_dropped} ICMP packets to it were dropped by a firewall, NETFILTER_DROP at "
        f"nft_do_chain in network namespace {lab.router_inode} ({icmp_dropped}), so the sender never learns the "
        f"smaller MTU and keeps sending full-size segments: a black hole. 1 connection of {comm} (pid {pid}) to "
        f"{lab.server_addr}:{port} retransmitted {counted} segments of up to {size} bytes, while segments of up to "
        f"{FIRST} bytes got through. The next link's MTU is below 1500 bytes (the smallest packet dropped) and at "
        f"least {FIRST + 52} ({FIRST} bytes that passed plus 52 of IP and TCP headers). Fix: let ICMP type 3 code 4 "
        f"(IPv6: type 2, packet too big) through, or clamp the TCP MSS at the hop (nft: tcp flags syn tcp option "
        f"maxseg size set rt mtu)."
    )
