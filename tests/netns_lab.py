"""One network namespace with its loopback up, for kernel tests that compare records with
the namespace's own counters (nstat: /proc/net/snmp and /proc/net/netstat read inside it):
no other traffic on this machine moves them. Loss comes from an nftables table made in the
namespace and deleted with it. Sockets are made inside it through `in_netns`
(tests/veth_lab.py), so the test process never moves. Used by the record-truth tests
(issue 16 item 3): retransmit kinds, aborted connections, tcpdebug drops."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.veth_lab import in_netns


def _run(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(args, input=stdin, capture_output=True, text=True, check=True, timeout=10)
    return done.stdout


@dataclass(frozen=True)
class Netns:
    name: str
    inode: int  # the collector's --filter netns=

    def run(self, *args: str, stdin: str | None = None) -> str:
        return _run("ip", "netns", "exec", self.name, *args, stdin=stdin)

    def sysctl(self, key: str, value: str) -> None:
        self.run("sysctl", "-qw", f"{key}={value}")

    def wire_like(self) -> None:
        """Loopback cut to Ethernet's 1,500-byte MTU without segmentation offload: every skb is
        one wire segment, so a loss rule drops single segments, not 64 KiB GSO super-packets."""
        self.run("ip", "link", "set", "lo", "mtu", "1500")
        self.run("ethtool", "-K", "lo", "tso", "off", "gso", "off")

    def socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        return in_netns(self.name, lambda: socket.socket(family, kind))

    def nft(self, ruleset: str) -> None:
        """Load nftables rules (nft -f syntax) into this namespace; they go with it."""
        self.run("nft", "-f", "-", stdin=ruleset)

    def drop(self, port: int, match: str) -> None:
        """An nftables table `loss` dropping the TCP segments to `port` that `match` selects,
        on input (a segment dropped on its way in is lost, as on a wire)."""
        chain = f"chain inp {{\n type filter hook input priority 0;\n tcp dport {port} {match} drop\n }}"
        self.nft(f"table inet loss {{\n {chain}\n}}\n")

    def stop_dropping(self) -> None:
        self.run("nft", "delete", "table", "inet", "loss")

    def counters(self) -> dict[str, int]:
        """Every counter of the namespace's /proc/net/snmp and /proc/net/netstat, named
        as nstat names them (TcpRetransSegs, TcpExtTCPLossProbes, ...)."""
        out: dict[str, int] = {}
        for path in ("/proc/net/snmp", "/proc/net/netstat"):
            lines = self.run("cat", path).splitlines()
            for names, values in zip(lines[::2], lines[1::2], strict=True):
                mib, _, keys = names.partition(": ")
                for key, value in zip(keys.split(), values.split(": ", 1)[1].split(), strict=True):
                    out[mib + key] = int(value)
        return out


def delta(before: dict[str, int], after: dict[str, int], *names: str) -> dict[str, int]:
    return {n: after[n] - before[n] for n in names}


def connected(ns: Netns) -> tuple[socket.socket, socket.socket, socket.socket]:
    """(listener, client, server) of a loopback TCP connection inside the namespace."""
    lst = ns.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen()
    client = ns.socket()
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # one skb per send
    client.connect(lst.getsockname())
    server, _ = lst.accept()
    return lst, client, server


def receive(server: socket.socket, total: int) -> None:
    """Read until `total` bytes came (bounded by a 5 s timeout per read)."""
    got = 0
    server.settimeout(5)
    while got < total and (chunk := server.recv(1 << 20)):
        got += len(chunk)
    assert got == total


@contextmanager
def netns_lab(**sysctls: str) -> Iterator[Netns]:
    """A namespace named after this process and thread; sysctls: key=value pairs applied
    inside it (dots as double underscores: net__ipv4__tcp_sack='0')."""
    name = f"ntkr{os.getpid() % 100000}{threading.get_ident() % 1000}"
    _run("ip", "netns", "add", name)
    try:
        _run("ip", "-n", name, "link", "set", "lo", "up")
        ns = Netns(name, os.stat(f"/run/netns/{name}").st_ino)
        for key, value in sysctls.items():
            ns.sysctl(key.replace("__", "."), value)
        yield ns
    finally:
        _run("ip", "netns", "del", name)  # takes its sockets' routes and nft tables along
