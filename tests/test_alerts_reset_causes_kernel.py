"""Issue 34 item 2 on real sockets: why a RST was received, one K3 finding per destination
that says which side sent it and the kernel's reason, checked against the kernel's counters.

Two namespaces joined by a veth pair; the client's namespace makes five connections to each
of three ports of the server's:
- no listener: the server's stack answers each SYN with a RST, reason NO_SOCKET;
- a firewall rule (nftables `reject with tcp reset` on the server's input): RSTs that no
  TCP stack sent (the server's TcpOutRsts does not count them; the rule's counter does);
- a listener whose application accepts and closes each connection with SO_LINGER 0: an
  active reset of the server's stack (reason TCP_STATE, from tcp_disconnect()).
The server's TcpOutRsts = the RSTs named as its stack's; the client's TcpAttemptFails and
TcpEstabResets = the refused and the aborted ones. One `nettrail collect --providers tcp
--alerts` filtered to the client's address runs around it. About 15 s.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import time
from pathlib import Path

from tests.alert_kernel_support import KERNEL_ALERTS, stop
from tests.collect_process import Collector
from tests.kernel_support import free_port
from tests.veth_lab import in_netns, veth_lab
from translators.records import Alert, from_json

pytestmark = KERNEL_ALERTS
N = 5
RULES = "[K3]\npeer_min_connections = 5\n[engine]\nupdate_interval_s = 1\n"


def ns_run(ns: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["ip", "netns", "exec", ns, *args], input=stdin, capture_output=True, text=True, check=True)
    return done.stdout


def nstat(ns: str, name: str) -> int:
    for line in ns_run(ns, "nstat", "-az", name).splitlines()[1:]:
        return int(line.split()[1])
    raise AssertionError(f"no {name}")


def test_each_reset_destination_is_one_k3_finding_that_says_who_sent_the_rsts_and_why(tmp_path: Path) -> None:
    rules, out = tmp_path / "rules.toml", tmp_path / "out.jsonl"
    rules.write_text(RULES)
    closed, walled, aborting = (free_port() for _ in range(3))
    with veth_lab(gro=False) as lab:
        ns_run(lab.b, "nft", "-f", "-", stdin="table inet ntrc {\n chain c {\n type filter hook input priority 0;\n"
               f" tcp dport {walled} counter reject with tcp reset;\n }}\n}}\n")  # fmt: skip
        col = Collector(
            "--providers", "tcp", "--filter", f"addr={lab.addr_a}", "--alerts", "--rules", str(rules),
            "--out", str(out),
        )  # fmt: skip
        lst = lab.socket(lab.b, socket.AF_INET, socket.SOCK_STREAM)
        held: list[socket.socket] = []
        try:
            col.wait_attached(timeout=120)
            time.sleep(1.0)
            lst.bind((lab.addr_b, aborting))
            lst.listen(16)
            for port in (closed, aborting, walled):
                for _ in range(N):
                    c = in_netns(lab.a, socket.socket)
                    c.settimeout(5)
                    held.append(c)
                    try:
                        c.connect((lab.addr_b, port))
                    except ConnectionRefusedError:
                        continue
                    srv, _ = lst.accept()
                    srv.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    srv.close()  # a RST, not a FIN
                    try:
                        c.recv(1)
                    except ConnectionResetError:
                        pass
            time.sleep(2.5)  # past update_interval_s and a sweep
            out_rsts, fw = nstat(lab.b, "TcpOutRsts"), ns_run(lab.b, "nft", "list", "table", "inet", "ntrc")
            refused, aborted = nstat(lab.a, "TcpAttemptFails"), nstat(lab.a, "TcpEstabResets")
        finally:
            code, _, err = stop(col, timeout=60)
            for c in held:
                c.close()
            lst.close()
            ns_run(lab.b, "nft", "delete", "table", "inet", "ntrc")
    assert code == 0, err
    rejected = int(fw.split("counter packets ")[1].split()[0])
    assert (out_rsts, rejected, refused, aborted) == (2 * N, N, 2 * N, N)
    alerts = [r for r in map(from_json, out.read_bytes().splitlines()) if isinstance(r, Alert)]
    k3 = {a.dport: a for a in alerts if a.rule_id == "K3" and a.condition == "peer-share" and a.dst == lab.addr_b}
    assert set(k3) == {closed, walled, aborting}

    def head(port: int, refused_n: int, aborted_n: int) -> str:
        return (
            f"The peer {lab.addr_b}:{port} (or a middlebox on the way) reset {N} of {N} new connections (100%) in "
            f"300 s: {refused_n} refused during the handshake, {aborted_n} aborted later. Clients of this service "
            f"are failing. Why: "
        )

    stack = f"the TCP stack of {lab.addr_b} (network namespace {lab.netns_b} of this host) sent them"
    assert k3[closed].message == head(closed, N, 0) + (
        f"{out_rsts - N} refused during the handshake: {stack}, reason NO_SOCKET (no socket for the segment: nothing "
        f"listens on the port, or the connection is gone)."
    )
    assert k3[walled].message == head(walled, N, 0) + (
        f"{rejected} refused during the handshake: no RST left the TCP stack of {lab.addr_b}, an address of this "
        f"host: a firewall rule (reject with tcp reset) or a middlebox sent them."
    )
    assert k3[aborting].message == head(aborting, 0, N) + (
        f"{aborted} aborted later: {stack}, reason TCP_STATE (the socket was closed or disconnected in a state that "
        f"requires a reset; an active reset of its application)."
    )
