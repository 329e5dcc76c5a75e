"""Issue 34 item 2 on real sockets: a path-MTU black hole is one K2 `pmtu-black-hole` finding
for the path, whose numbers are the kernel's own: the packets dropped as PKT_TOO_BIG = the
router namespace's IpFragFails (`nstat -az` there), the ICMP errors dropped = the nftables
rule's counter, the connection and its retransmits = the collector's records.

tests/router_lab.py: client -- router -- server namespaces, the router's link to the server
with MTU 1280 and an nftables rule dropping its ICMP "fragmentation needed", in the router
(its output) or in the client (its input).
The client first sends 1,000 bytes (they fit and are acknowledged), then 20,000 that never
pass. One `nettrail collect --providers tcp,siftr,skb --ppl 1 --alerts`, filtered to the
client's address, runs around it; its own output is read back. IPv4 with the rule in the
router or in the client, IPv6 with it in the router (Ip6FragFails). About 15 s each.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from analysis.alerts.rules.base import endpoint
from tests.alert_kernel_support import KERNEL_ALERTS, pick, split_alerts, stop
from tests.collect_process import Collector
from tests.router_lab import RouterLab, router_lab
from translators.records import SkbDrop, TcpRetransmit, from_json

pytestmark = KERNEL_ALERTS
RULES = "[engine]\nupdate_interval_s = 1\n"
FIRST = 1000  # bytes that fit through the 1280-byte link


def nstat(ns: str) -> dict[str, int]:
    """The namespace's counters as `nstat -az` prints them (absolute, zeros too)."""
    out = subprocess.run(["ip", "netns", "exec", ns, "nstat", "-az"], capture_output=True, text=True, check=True)
    return {line.split()[0]: int(line.split()[1]) for line in out.stdout.splitlines()[1:]}


def in_ns(ns: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["ip", "netns", "exec", ns, *args], input=stdin, capture_output=True, text=True, check=True)
    return done.stdout


def client_firewall(ns: str) -> None:
    """The ICMP errors dropped at the sender's own input instead (a host firewall), counted."""
    rules = (
        "table inet pmtu_in {\n chain in {\n type filter hook input priority 0;\n"
        " icmp type destination-unreachable counter drop\n }\n}\n"
    )
    in_ns(ns, "nft", "-f", "-", stdin=rules)


def client_dropped(ns: str) -> int:
    return sum(
        int(n) for n in re.findall(r"counter packets (\d+)", in_ns(ns, "nft", "list", "table", "inet", "pmtu_in"))
    )


def hole_traffic(lab: RouterLab, family: int, server_addr: str) -> tuple[int, int]:
    """The client sends FIRST bytes (they fit, the server reads them), then 20,000 that do not
    fit, for 8 s (the first burst and about five timeouts' retransmits), then aborts.
    Returns the client's and the server's ports."""
    lst = lab.socket(lab.server, family)
    client = lab.socket(lab.client, family)
    try:
        lst.bind((server_addr, 0))
        lst.listen()
        port = lst.getsockname()[1]
        client.connect((server_addr, port))
        server, _ = lst.accept()
        client.sendall(b"x" * FIRST)
        got = b""
        while len(got) < FIRST:
            got += server.recv(FIRST)
        time.sleep(0.2)  # the acknowledgment is back
        threading.Thread(target=lambda: client.sendall(b"y" * 20000), daemon=True).start()
        time.sleep(8.0)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sport = client.getsockname()[1]
        client.close()  # an abort: nothing more into the hole
        server.close()
    finally:
        client.close()
        lst.close()
    return sport, port


@pytest.mark.parametrize(
    ("firewall", "family"),
    [("router", socket.AF_INET), ("client", socket.AF_INET), ("router", socket.AF_INET6)],
    ids=["router-ipv4", "client-ipv4", "router-ipv6"],
)
def test_a_path_mtu_black_hole_is_one_finding_with_the_routers_ipfragfails_and_the_nft_counter(
    tmp_path: Path, firewall: str, family: int
) -> None:
    rules, out = tmp_path / "rules.toml", tmp_path / "out.jsonl"
    rules.write_text(RULES)
    with router_lab(black_hole=firewall == "router") as lab:
        if firewall == "client":
            client_firewall(lab.client)
        v6 = family == socket.AF_INET6
        client_addr, server_addr = (lab.client_addr6, lab.server_addr6) if v6 else (lab.client_addr, lab.server_addr)
        wall = os.stat(f"/run/netns/{lab.router if firewall == 'router' else lab.client}").st_ino
        col = Collector(
            "--providers", "tcp,siftr,skb", "--ppl", "1", "--filter", f"addr={client_addr}", "--alerts",
            "--rules", str(rules), "--out", str(out),
        )  # fmt: skip
        try:
            col.wait_attached(timeout=120)
            time.sleep(1.5)  # the stack counters' baseline of the namespaces
            sport, port = hole_traffic(lab, family, server_addr)
            time.sleep(2.5)  # the router's counters read once more
            counters = nstat(lab.router)
            icmp_dropped = lab.icmp_dropped() if firewall == "router" else client_dropped(lab.client)
        finally:
            code, _, err = stop(col, timeout=60)
    assert code == 0, err
    records, alerts = split_alerts([from_json(line) for line in out.read_bytes().splitlines()])
    mib = "Ip6" if v6 else "Ip"
    frag_fails = counters[f"{mib}FragFails"]
    headers = 72 if v6 else 52  # IP and TCP with timestamps
    icmp_words = '"packet too big"' if v6 else '"fragmentation needed"'
    where = endpoint(server_addr, port)
    drops = [r for r in records if isinstance(r, SkbDrop) and r.drop_reason_str == "PKT_TOO_BIG"]
    icmp = [r for r in records if isinstance(r, SkbDrop) and r.drop_reason_str == "NETFILTER_DROP"]
    icmp = [r for r in icmp if r.l4_proto in ("icmp", "icmpv6") and r.dst == client_addr]
    seen = len(drops)
    # Every packet IpFragFails counts is a PKT_TOO_BIG drop record, and every ICMP error the nft
    # rule counted a NETFILTER_DROP record, unless the collector missed the kfree_skb event: seen
    # once in about a dozen runs (one drop and its ICMP error absent, no loss report; CI loaded the
    # host), an open collector issue. The finding states what was recorded, and the kernel's own
    # IpFragFails, so both are checked exactly against their sources.
    missed = frag_fails - seen
    assert frag_fails >= 3 and icmp_dropped >= 1 and missed in (0, 1)
    assert len(icmp) == icmp_dropped if missed == 0 else icmp_dropped - 1 <= len(icmp) <= icmp_dropped
    found = pick(alerts, "K2", "pmtu-black-hole")
    assert len(found) == 1  # one finding for the path
    a = found[0]
    tuple_of = (client_addr, sport, server_addr, port)
    retrans = [r for r in records if isinstance(r, TcpRetransmit) and (r.src, r.sport, r.dst, r.dport) == tuple_of]
    counted = sum(r.segs or 1 for r in retrans if r.tcp_payload_len and r.ts_wall >= drops[0].ts_wall)
    size = max(r.tcp_payload_len // (r.segs or 1) for r in retrans if r.tcp_payload_len)
    conn = next(r.conn_uuid for r in retrans)
    small, large = min(r.len or 0 for r in drops), max(r.len or 0 for r in drops)
    sizes = f"{small}" if small == large else f"{small} to {large}"
    comm, pid = Path("/proc/self/comm").read_text().strip(), os.getpid()
    assert (a.severity, a.metric, a.count, a.members, a.member_conn_uuids) == (
        "critical", float(seen), seen, 1, [conn]
    )  # fmt: skip
    assert (a.src, a.dst, a.dport, a.netns) == (client_addr, server_addr, port, lab.router_inode)
    assert small == 1500 and size == 1500 - headers
    assert a.message == (
        f"Path-MTU black hole toward {server_addr}: the forwarding hop in network namespace {lab.router_inode} "
        f"({lab.router}) on this host dropped {seen} packets of {sizes} bytes as PKT_TOO_BIG (larger than its "
        f"next link's MTU, with Don't Fragment set); it counted {frag_fails} {mib}FragFails meanwhile ({frag_fails} "
        f"since it was created, as nstat -a reads them). Its ICMP errors ({icmp_words}) never reached the "
        f"sender {client_addr}: {len(icmp)} ICMP packets to it were dropped by a firewall, NETFILTER_DROP at "
        f"nft_do_chain in network namespace {wall} ({len(icmp)}), so the sender never learns the "
        f"smaller MTU and keeps sending full-size segments: a black hole. 1 connection of {comm} (pid {pid}) to "
        f"{where} retransmitted {counted} segments of up to {size} bytes, while segments of up to "
        f"{FIRST} bytes got through. The next link's MTU is below 1500 bytes (the smallest packet dropped) and at "
        f"least {FIRST + headers} ({FIRST} bytes that passed plus {headers} of IP and TCP headers). Fix: let ICMP type 3 code 4 "
        f"(IPv6: type 2, packet too big) through, or clamp the TCP MSS at the hop (nft: tcp flags syn tcp option "
        f"maxseg size set rt mtu)."
    )
    [rto] = pick(alerts, "K2", "rto", dport=port)
    assert rto.message.endswith(
        f" The likely cause: a path-MTU black hole on the way to {server_addr} (its K2 pmtu-black-hole finding)."
    )


def test_a_hole_beyond_the_traced_namespace_is_suspected_from_the_sizes_retransmitted_and_acknowledged(
    tmp_path: Path,
) -> None:
    """The collector sees only the client's namespace (--filter netns=): the router's drops and
    its ICMP errors are out of sight, as on a router beyond the host. The finding is told from
    the client's retransmits of 1,448 bytes, never acknowledged, and its 1,000 bytes that were."""
    rules, out = tmp_path / "rules.toml", tmp_path / "out.jsonl"
    rules.write_text(RULES)
    with router_lab() as lab:
        client_ns = os.stat(f"/run/netns/{lab.client}").st_ino
        col = Collector(
            "--providers", "tcp,siftr,skb", "--ppl", "1", "--filter", f"netns={client_ns}", "--alerts",
            "--rules", str(rules), "--out", str(out),
        )  # fmt: skip
        try:
            col.wait_attached(timeout=120)
            time.sleep(1.5)
            sport, port = hole_traffic(lab, socket.AF_INET, lab.server_addr)
            time.sleep(1.0)
        finally:
            code, _, err = stop(col, timeout=60)
    assert code == 0, err
    records, alerts = split_alerts([from_json(line) for line in out.read_bytes().splitlines()])
    assert not [r for r in records if isinstance(r, SkbDrop) and r.drop_reason_str == "PKT_TOO_BIG"]
    tuple_of = (lab.client_addr, sport, lab.server_addr, port)
    retrans = [r for r in records if isinstance(r, TcpRetransmit) and (r.src, r.sport, r.dst, r.dport) == tuple_of]
    big = sum(r.segs or 1 for r in retrans if r.tcp_payload_len and r.tcp_payload_len // (r.segs or 1) > FIRST)
    assert big >= 3
    found = pick(alerts, "K2", "pmtu-black-hole")
    assert len(found) == 1
    a = found[0]
    comm, pid = Path("/proc/self/comm").read_text().strip(), os.getpid()
    assert (a.severity, a.metric, a.count, a.members, a.member_conn_uuids, a.netns) == (
        "warning", float(big), big, 1, [retrans[0].conn_uuid], client_ns
    )  # fmt: skip
    assert a.message == (
        f"Path-MTU black hole suspected toward {lab.server_addr}: 1 connection of {comm} (pid {pid}) to "
        f"{lab.server_addr}:{port} retransmitted {big} segments of up to 1448 bytes and no segment that large was "
        f"ever acknowledged, while segments of up to {FIRST} bytes got through. No hop on this host dropped them: a "
        f'router beyond it drops packets larger than its next link\'s MTU and its ICMP "fragmentation needed" does '
        f"not come back (filtered on the way, or never sent). The path carries {FIRST} bytes of payload per segment "
        f"but not 1448. Fix: let ICMP type 3 code 4 (IPv6: type 2, packet too big) through, or clamp the TCP MSS "
        f"(nft: tcp flags syn tcp option maxseg size set rt mtu)."
    )
