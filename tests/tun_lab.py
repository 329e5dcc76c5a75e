"""A network namespace with a tun device whose "wire" is this test process: IPv4 packets
written to the tun file descriptor are received by the namespace's stack through
netif_receive_skb(), called directly in the writer's system call (tun_rx_batched), which
is the one traffic path that fires the netif_receive_skb_entry tracepoint on this kernel
(veth goes through napi_gro_receive or netif_rx). Used by tests/test_collect_skb_tun.py.
The namespace is created per test and deleted by name after (it takes the tun device
with it). Packets to write come from tests/packets.py."""

from __future__ import annotations

import fcntl
import os
import select
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.packets import ACK, SYN
from tests.veth_lab import in_netns

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
LOCAL, PEER = "10.204.0.1", "10.204.0.2"  # the namespace's address, the sender behind the tun


@dataclass(frozen=True)
class TunLab:
    ns: str
    fd: int  # the tun device's file descriptor: write = receive in the namespace
    netns: int  # inode of the namespace (the collector's --filter netns=)

    def socket(self, family: int, kind: int) -> socket.socket:
        return in_netns(self.ns, lambda: socket.socket(family, kind))

    def inject(self, packet: bytes) -> None:
        assert os.write(self.fd, packet) == len(packet)

    def syn_ack_to(self, sport: int, timeout: float = 5.0) -> tuple[int, int]:
        """(seq, ack) of the namespace's SYN-ACK to our port `sport`; other packets the
        namespace sends out (IPv6 chatter) are read and skipped. Bounded by timeout."""
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            if not select.select([self.fd], [], [], left)[0]:
                break
            pkt = os.read(self.fd, 65536)
            if pkt[0] >> 4 != 4 or pkt[9] != socket.IPPROTO_TCP:
                continue
            ihl = (pkt[0] & 0xF) * 4
            _, dport, seq, ack, _, flags = struct.unpack("!HHIIBB", pkt[ihl : ihl + 14])
            if dport == sport and flags & (SYN | ACK) == SYN | ACK:
                return seq, ack
        raise TimeoutError(f"no SYN-ACK to port {sport} on the tun device")


def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@contextmanager
def tun_lab() -> Iterator[TunLab]:
    tag = f"{os.getpid() % 100000}{threading.get_ident() % 1000}"
    ns, dev = f"ntt{tag}", f"ntt{tag}"[:15]
    _ip("netns", "add", ns)
    try:
        fd = in_netns(ns, lambda: _open_tun(dev))
        try:
            _ip("-n", ns, "addr", "add", f"{LOCAL}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            yield TunLab(ns, fd, os.stat(f"/run/netns/{ns}").st_ino)
        finally:
            os.close(fd)  # a non-persistent tun device goes away with its last descriptor
    finally:
        _ip("netns", "del", ns)
