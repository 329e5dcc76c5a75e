"""Test helper: a three-namespace lab (client - router - server) that records real kernel traffic.

`record_scenarios(tmpdir)` builds namespaces ntlab<pid>{c,r,s} joined by veth pairs with
TSO/GSO/GRO off (segments stay MTU-sized), puts an nftables table in the router that
drops a share of one scenario's data segments (`numgen random mod 100 < N drop`), runs
every scenario at once (clean bulk, random loss, slow reader, refused connection,
abortive close, keep-alives, UDP to a closed port) and records the client's and the
server's view with tcpdump. Everything it creates (namespaces, the nft table, processes)
is removed by name/PID in a finally block.

Keep in sync with: tests/test_analyze_vs_tshark.py (ports and expected scenarios).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

CLIENT_IP, SERVER_IP = "10.77.1.1", "10.77.2.1"
CLIENT_IP6, SERVER_IP6 = "fd00:77:1::1", "fd00:77:2::1"
PORTS = {
    "bulk": 5001, "loss": 5002, "slow": 5003, "refused": 5004, "abort": 5005, "keepalive": 5006, "udp": 5007,
    "bulk6": 5011, "loss6": 5012,
}  # fmt: skip
LOSS_PERCENT = 4

SERVER = r"""
import socket, sys, threading, time
S, S6 = sys.argv[1], sys.argv[2]
def serve(port, handler, rcvbuf=None, family=socket.AF_INET):
    ls = socket.socket(family)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf:
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    ls.bind((S if family == socket.AF_INET else S6, port)); ls.listen(4)
    def run():
        c, _ = ls.accept()
        handler(c)
        c.close()
    t = threading.Thread(target=run); t.start(); return t
def drain(c):
    try:
        while c.recv(65536):
            pass
    except ConnectionResetError:
        pass
def slow(c):
    time.sleep(2.0)
    for _ in range(40):
        if not c.recv(1024):
            return
        time.sleep(0.01)
    drain(c)
def abort(c):
    drain(c)
def keepalive(c):
    drain(c)
ts = [serve(5001, drain), serve(5002, drain), serve(5003, slow, 4096), serve(5005, abort), serve(5006, keepalive)]
ts += [serve(5011, drain, family=socket.AF_INET6), serve(5012, drain, family=socket.AF_INET6)]
print("ready", flush=True)
for t in ts:
    t.join()
"""

CLIENT = r"""
import socket, struct, sys, threading, time
S, S6 = sys.argv[1], sys.argv[2]
DATA = bytes(range(256)) * 4096  # 1 MiB
def bulk(port, size, host=None):
    c = socket.create_connection((host or S, port)); c.sendall(DATA[:size]); c.shutdown(socket.SHUT_WR)
    c.recv(1); c.close()
def refused():
    try:
        socket.create_connection((S, 5004), timeout=2)
    except OSError:
        pass
def abort():
    c = socket.create_connection((S, 5005)); c.sendall(b"x" * 5000); time.sleep(0.2)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); c.close()
def keepalive():
    c = socket.create_connection((S, 5006))
    c.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    c.sendall(b"hello"); time.sleep(3.6); c.close()
def udp():
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.sendto(b"ping", (S, 5007)); time.sleep(0.3); u.close()
jobs = [lambda: bulk(5001, 1 << 20), lambda: bulk(5002, 1 << 20), lambda: bulk(5003, 600000), refused, abort, keepalive, udp]
jobs += [lambda: bulk(5011, 1 << 19, S6), lambda: bulk(5012, 1 << 19, S6)]
ts = [threading.Thread(target=j) for j in jobs]
for t in ts:
    t.start()
for t in ts:
    t.join()
"""


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


def _ns(ns: str, *args: str) -> None:
    _sh("ip", "netns", "exec", ns, *args)


class Lab:
    def __init__(self) -> None:
        tag = f"ntlab{os.getpid() % 100000}"
        self.c, self.r, self.s = f"{tag}c", f"{tag}r", f"{tag}s"
        self.created: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def build(self) -> None:
        for ns in (self.c, self.r, self.s):
            _sh("ip", "netns", "add", ns)
            self.created.append(ns)
            _ns(ns, "ip", "link", "set", "lo", "up")
        _sh("ip", "link", "add", "vc", "netns", self.c, "type", "veth", "peer", "name", "rc", "netns", self.r)
        _sh("ip", "link", "add", "vs", "netns", self.s, "type", "veth", "peer", "name", "rs", "netns", self.r)
        for ns, dev, addr in (
            (self.c, "vc", CLIENT_IP),
            (self.r, "rc", "10.77.1.254"),
            (self.r, "rs", "10.77.2.254"),
            (self.s, "vs", SERVER_IP),
        ):
            _ns(ns, "ip", "addr", "add", f"{addr}/24", "dev", dev)
            addr6 = {
                "10.77.1.1": CLIENT_IP6,
                "10.77.2.1": SERVER_IP6,
                "10.77.1.254": "fd00:77:1::fe",
                "10.77.2.254": "fd00:77:2::fe",
            }[addr]
            _ns(ns, "ip", "-6", "addr", "add", f"{addr6}/64", "dev", dev, "nodad")
            _ns(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off")
            _ns(ns, "ip", "link", "set", dev, "up")
        _ns(self.c, "ip", "route", "add", "default", "via", "10.77.1.254")
        _ns(self.s, "ip", "route", "add", "default", "via", "10.77.2.254")
        _ns(self.c, "ip", "-6", "route", "add", "default", "via", "fd00:77:1::fe")
        _ns(self.s, "ip", "-6", "route", "add", "default", "via", "fd00:77:2::fe")
        _ns(self.r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        _ns(self.r, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        rules = (
            "table inet ntlab {\n chain impair {\n  type filter hook forward priority 0;\n"
            f"  tcp dport {{ {PORTS['loss']}, {PORTS['loss6']} }} meta length > 100 numgen random mod 100 < {LOSS_PERCENT} drop\n }}\n}}\n"
        )
        subprocess.run(
            ["ip", "netns", "exec", self.r, "nft", "-f", "-"],
            input=rules.encode(),
            check=True,
            capture_output=True,
            timeout=30,
        )

    def tcpdump(self, ns: str, dev: str, path: Path) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(
            ["ip", "netns", "exec", ns, "tcpdump", "-i", dev, "-U", "-B", "16384", "-n", "-s", "0", "-w", str(path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        self.procs.append(p)
        assert p.stderr is not None
        line = p.stderr.readline()  # "listening on ..." once the capture is open
        assert b"listening" in line, line
        return p

    def run(self, tmp: Path) -> tuple[Path, Path, int]:
        """-> (client view, server view, packets the kernel dropped before tcpdump saw them)."""
        client_pcap, server_pcap = tmp / "client.pcap", tmp / "server.pcap"
        dumps = [self.tcpdump(self.c, "vc", client_pcap), self.tcpdump(self.s, "vs", server_pcap)]
        server = subprocess.Popen(
            ["ip", "netns", "exec", self.s, sys.executable, "-c", SERVER, SERVER_IP, SERVER_IP6], stdout=subprocess.PIPE
        )
        self.procs.append(server)
        assert server.stdout is not None
        assert server.stdout.readline().strip() == b"ready"
        _ns(self.c, sys.executable, "-c", CLIENT, SERVER_IP, SERVER_IP6)
        server.wait(timeout=30)
        # libpcap hands packets over in blocks retired after up to a second: wait for the
        # last FIN/ACK exchange to be delivered before stopping the captures
        time.sleep(1.2)
        dropped = 0
        for p in dumps:
            p.send_signal(signal.SIGINT)
            _, err = p.communicate(timeout=10)
            found = re.search(rb"(\d+) packets? dropped by kernel", err)
            dropped += int(found.group(1)) if found else 0
        return client_pcap, server_pcap, dropped

    def destroy(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=5)
        if self.r in self.created:
            subprocess.run(
                ["ip", "netns", "exec", self.r, "nft", "delete", "table", "inet", "ntlab"], capture_output=True
            )
        for ns in self.created:
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def record_scenarios(tmp: Path, attempts: int = 3) -> tuple[Path, Path]:
    """Record both views; a run where the kernel dropped packets before tcpdump saw them
    is recorded again (under heavy load), since the comparison needs complete captures."""
    for attempt in range(attempts):
        lab = Lab()
        try:
            lab.build()
            client, server, dropped = lab.run(tmp)
        finally:
            lab.destroy()
        if dropped == 0 or attempt == attempts - 1:
            assert dropped == 0, f"tcpdump lost {dropped} packets in {attempts} attempts; the machine is too loaded"
            return client, server
    raise AssertionError("unreachable")
