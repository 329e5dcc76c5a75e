"""Three network namespaces in a line, client -- router -- server, the router forwarding
between two veth pairs, the server's side with a smaller MTU: a sender's full-size segments
with DF set are dropped at the router as PKT_TOO_BIG (ip_forward / ip6_forward). With
`black_hole`, the router's ICMP "fragmentation needed" / "packet too big" never leaves it
(an nftables table in the router, a counter on each rule, gone with its namespace), so the
sender keeps sending full-size segments: a path-MTU black hole on one host. Sockets are made inside a namespace
through `in_netns` (tests/veth_lab.py), so the test process never moves. Everything is
deleted by name after."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.veth_lab import in_netns


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _in(ns: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        ["ip", "netns", "exec", ns, *args], input=stdin, check=True, capture_output=True, text=True, timeout=10
    )
    return done.stdout


@dataclass(frozen=True)
class RouterLab:
    client: str
    router: str
    server: str
    client_addr: str
    server_addr: str
    client_addr6: str
    server_addr6: str
    router_inode: int  # the collector's --filter netns=
    small_mtu: int

    def socket(self, ns: str, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        return in_netns(ns, lambda: socket.socket(family, kind))

    def frag_fails(self) -> int:
        """The router's IpFragFails + Ip6FragFails (nstat): one per packet too big to forward."""
        total = 0
        for path, key in (("/proc/net/snmp", "Ip:"), ("/proc/net/snmp6", "Ip6FragFails")):
            text = _in(self.router, "cat", path)
            if key == "Ip:":
                lines = [line for line in text.splitlines() if line.startswith("Ip:")]
                names, values = lines[0].split(), lines[1].split()
                total += int(values[names.index("FragFails")])
            else:
                total += sum(int(line.split()[1]) for line in text.splitlines() if line.startswith(key))
        return total

    def icmp_dropped(self) -> int:
        """Packets the black hole's nftables rules dropped (their counters: nft list table)."""
        text = _in(self.router, "nft", "list", "table", "inet", "pmtu_hole")
        return sum(int(n) for n in re.findall(r"counter packets (\d+)", text))


@contextmanager
def router_lab(small_mtu: int = 1280, black_hole: bool = True) -> Iterator[RouterLab]:
    tag = f"{os.getpid() % 100000}{threading.get_ident() % 1000}"
    c, r, s = f"ntrc{tag}", f"ntrr{tag}", f"ntrs{tag}"
    made: list[str] = []
    try:
        for ns in (c, r, s):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", ns, "link", "set", "lo", "up")
        for ns_a, dev_a, ns_b, dev_b in ((c, "c0", r, "r0"), (r, "r1", s, "s0")):
            _ip(
                "link",
                "add",
                f"{dev_a}{tag}"[:15],
                "netns",
                ns_a,
                "type",
                "veth",
                "peer",
                "name",
                f"{dev_b}{tag}"[:15],
                "netns",
                ns_b,
            )
        addrs = (
            (c, "c0", "10.77.41.1/24", "fd00:7741::1/64"),
            (r, "r0", "10.77.41.2/24", "fd00:7741::2/64"),
            (r, "r1", "10.77.42.1/24", "fd00:7742::1/64"),
            (s, "s0", "10.77.42.2/24", "fd00:7742::2/64"),
        )
        for ns, dev, v4, v6 in addrs:
            name = f"{dev}{tag}"[:15]
            _ip("-n", ns, "addr", "add", v4, "dev", name)
            _ip("-n", ns, "addr", "add", v6, "dev", name, "nodad")
            if dev == "r1":  # the server still announces a 1,460-byte MSS
                _ip("-n", ns, "link", "set", name, "mtu", str(small_mtu))
            _ip("-n", ns, "link", "set", name, "up")
        _ip("-n", c, "route", "add", "default", "via", "10.77.41.2")
        _ip("-n", c, "-6", "route", "add", "default", "via", "fd00:7741::2")
        _ip("-n", s, "route", "add", "default", "via", "10.77.42.1")
        _ip("-n", s, "-6", "route", "add", "default", "via", "fd00:7742::1")
        _in(r, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        _in(r, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
        if black_hole:
            rules = (
                "table inet pmtu_hole {\n chain out {\n type filter hook output priority 0;\n"
                " icmp type destination-unreachable counter drop\n icmpv6 type packet-too-big counter drop\n }\n}\n"
            )
            _in(r, "nft", "-f", "-", stdin=rules)
        yield RouterLab(
            c,
            r,
            s,
            "10.77.41.1",
            "10.77.42.2",
            "fd00:7741::1",
            "fd00:7742::2",
            os.stat(f"/run/netns/{r}").st_ino,
            small_mtu,
        )
    finally:
        for ns in reversed(made):
            _ip("netns", "del", ns)  # takes its veth ends and nft tables along
