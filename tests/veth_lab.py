"""Two network namespaces joined by a veth pair, for kernel tests of the receive path
(skb lifecycles on veth, with GRO on or off). Created per test and deleted by name after
(only the namespaces and links this module made). Sockets are opened inside a namespace
from a short-lived thread that joins it (`in_netns`, also used by tests/tun_lab.py), so the
test process itself never moves."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
T = TypeVar("T")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def _ethtool(ns: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "ethtool", *args], check=True, capture_output=True, timeout=10)


@dataclass(frozen=True)
class Lab:
    a: str  # the sender's namespace
    b: str  # the receiver's namespace
    addr_a: str
    addr_b: str
    addr6_a: str
    addr6_b: str
    dev_b: str
    netns_b: int  # inode of b (the collector's --filter netns=)

    def socket(self, ns: str, family: int, kind: int) -> socket.socket:
        """A socket created inside namespace `ns`."""
        return in_netns(ns, lambda: socket.socket(family, kind))


def in_netns(ns: str, make: Callable[[], T]) -> T:
    """make()'s result, called from a short-lived thread that joined namespace `ns` (sockets
    and tun devices stay in the namespace they were created in)."""
    out: list[T | BaseException] = []

    def enter() -> None:
        try:
            with open(f"/run/netns/{ns}") as f:
                if _libc.setns(f.fileno(), CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns")
            out.append(make())
        except BaseException as exc:  # handed to the caller
            out.append(exc)

    t = threading.Thread(target=enter)
    t.start()
    t.join(10)
    [got] = out
    if isinstance(got, BaseException):
        raise got
    return got


@contextmanager
def veth_lab(gro: bool) -> Iterator[Lab]:
    """veth a<->b; gro: GRO on b's end (veth then receives through NAPI; the sender's
    TSO is turned off so its segments are eligible), else plain netif_rx."""
    tag = f"{os.getpid() % 100000}{threading.get_ident() % 1000}"
    a, b, dev_a, dev_b = f"ntva{tag}", f"ntvb{tag}", f"nva{tag}"[:15], f"nvb{tag}"[:15]
    _ip("netns", "add", a)
    try:
        _ip("netns", "add", b)
        try:
            _ip("link", "add", dev_a, "netns", a, "type", "veth", "peer", "name", dev_b, "netns", b)
            for ns, dev, v4, v6 in ((a, dev_a, "10.203.0.1", "fd00:203::1"), (b, dev_b, "10.203.0.2", "fd00:203::2")):
                _ip("-n", ns, "addr", "add", f"{v4}/24", "dev", dev)
                _ip("-n", ns, "addr", "add", f"{v6}/64", "dev", dev, "nodad")
                _ip("-n", ns, "link", "set", dev, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
            _ethtool(b, "-K", dev_b, "gro", "on" if gro else "off")
            if gro:
                _ethtool(a, "-K", dev_a, "tso", "off")
            yield Lab(
                a, b, "10.203.0.1", "10.203.0.2", "fd00:203::1", "fd00:203::2", dev_b, os.stat(f"/run/netns/{b}").st_ino
            )
        finally:
            _ip("netns", "del", b)  # takes the veth pair with it
    finally:
        _ip("netns", "del", a)
