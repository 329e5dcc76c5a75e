"""Issue 34 item 2 on real sockets: an accept queue that overflows is one K4 finding that
names the listener, its queue and backlog (as `ss -ltn` shows them) and its namespace's
ListenOverflows / ListenDrops (as `nstat -az` reads them), and K8 says the connects were
dropped by that listener, not by "the peer or the path".

Two namespaces joined by a veth pair: the server's listener (backlog 4, never accepting)
in one, ten clients connecting from the other (tcp_syn_retries 2: each gives up after
about 7 s). One `nettrail collect --providers tcp --alerts` filtered to the port runs
around it; its own output is read back. About 20 s.
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
from tests.veth_lab import in_netns, veth_lab
from translators.records import Alert, SockEvent, StackCounter, from_json

pytestmark = KERNEL_ALERTS
BACKLOG, CLIENTS = 4, 10
RULES = "[K8]\nsyn_sent_s = 2\n[engine]\nupdate_interval_s = 1\n"


def ns_run(ns: str, *args: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *args], capture_output=True, text=True, check=True).stdout


def nstat(ns: str) -> dict[str, int]:
    """The namespace's counters as `nstat -az` prints them (absolute, zeros too)."""
    out = {}
    for line in ns_run(ns, "nstat", "-az").splitlines()[1:]:
        name, value, *_ = line.split()
        out[name] = int(value)
    return out


def test_an_overflowing_accept_queue_is_one_k4_finding_naming_the_listener_with_ss_and_nstat_numbers(
    tmp_path: Path,
) -> None:
    rules, out = tmp_path / "rules.toml", tmp_path / "out.jsonl"
    rules.write_text(RULES)
    port = free_port()
    with veth_lab(gro=False) as lab:
        ns_run(lab.a, "sysctl", "-qw", "net.ipv4.tcp_syn_retries=2")
        col = Collector(
            "--providers", "tcp", "--filter", f"port={port}", "--alerts", "--rules", str(rules), "--out", str(out)
        )  # fmt: skip
        lst = lab.socket(lab.b, socket.AF_INET, socket.SOCK_STREAM)
        clients: list[socket.socket] = []
        try:
            col.wait_attached(timeout=120)
            time.sleep(1.5)  # the stack counters' baseline of the namespaces
            lst.bind((lab.addr_b, port))
            lst.listen(BACKLOG)
            for _ in range(CLIENTS):
                c = in_netns(lab.a, socket.socket)
                c.setblocking(False)
                c.connect_ex((lab.addr_b, port))
                clients.append(c)
            time.sleep(3.5)  # the SYN retries at 1 s and 3 s overflow the full queue again
            listening = ns_run(lab.b, "ss", "-Hltn", f"sport = :{port}").split()
            syn_sent = len(ns_run(lab.a, "ss", "-Htn", "state", "syn-sent").splitlines())
            time.sleep(6.0)  # past the clients' give-up (1 + 2 + 4 s) and a counter read
            counters = nstat(lab.b)
        finally:
            code, _, err = stop(col, timeout=60)
            for c in clients:
                c.close()
            lst.close()
    assert code == 0, err
    comm, pid = Path("/proc/self/comm").read_text().strip(), os.getpid()
    queue, backlog = int(listening[1]), int(listening[2])
    assert (listening[0], queue, backlog) == ("LISTEN", BACKLOG + 1, BACKLOG)  # full: more waiting than the backlog
    overflows, drops = counters["TcpExtListenOverflows"], counters["TcpExtListenDrops"]
    assert syn_sent == CLIENTS - queue
    assert overflows == drops >= 3 * syn_sent  # each client's SYN and its retries, each dropped
    records = [from_json(line) for line in out.read_bytes().splitlines()]
    # (the stack counters read every namespace: a test running beside this one has its own)
    full = [r for r in records if isinstance(r, SockEvent) and r.probe == "listen-overflow" and r.sport == port]
    assert full and all(
        (r.netns, r.src, r.sport, r.queue, r.backlog, r.tgid, r.comm)
        == (lab.netns_b, lab.addr_b, port, queue, backlog, pid, comm)
        for r in full
    )
    moves = [r for r in records if isinstance(r, StackCounter) and r.netns == lab.netns_b]
    moves = [r for r in moves if r.counter == "ListenOverflows"]
    busy = len({int(r.ts_wall) for r in moves if int(r.ts_wall) > int(moves[-1].ts_wall) - 10})
    alerts = [r for r in records if isinstance(r, Alert)]
    k4 = [a for a in alerts if a.rule_id == "K4" and a.netns == lab.netns_b]
    assert {a.alert_id for a in k4} == {k4[0].alert_id}  # one finding for the listener, all its versions
    latest = k4[-1]
    assert (latest.condition, latest.src, latest.sport, latest.tgid, latest.comm, latest.proto) == (
        "overflow",
        lab.addr_b,
        port,
        pid,
        comm,
        "tcp",
    )
    assert latest.metric == float(overflows)
    assert latest.message == (
        f"The listener {lab.addr_b}:{port} of {comm} (pid {pid}) has a full accept queue: {queue} connections wait "
        f"for accept() and its backlog is {backlog} (ss -ltn: Recv-Q {queue}, Send-Q {backlog}), so it drops every "
        f"new SYN and handshake-completing ACK. network namespace {lab.netns_b} ({lab.b}) counted {overflows} "
        f"ListenOverflows and {drops} ListenDrops in the last 10 s (overflow in {busy} of them; {overflows} and {drops} "
        f"since it was created, as nstat -a reads them). Each drop costs a client at least a 1 s retry: the "
        f"application accepts too slowly or its listen() backlog (capped by net.core.somaxconn) is too small."
    )
    # K8: the clients' stuck connects and their timeouts name the full listener as the cause
    cause = (
        f"the listener {lab.addr_b}:{port} of {comm} (pid {pid}) in network namespace {lab.netns_b} on this host has "
        f"a full accept queue ({queue} waiting, backlog {backlog}) and drops their SYNs (its K4 finding has the counts)."
    )
    k8 = {a.condition: a for a in alerts if a.rule_id == "K8" and a.dport == port}
    assert k8["syn-sent"].message.endswith(" The cause: " + cause)
    assert k8["connect-timeout"].members == syn_sent
    assert k8["connect-timeout"].message.endswith("connect timeouts, " + cause)
    assert "the peer or the path" not in k8["connect-timeout"].message
