"""Traffic for tests/test_collect_siftr_poll.py, run in a network namespace of its own
(`unshare -n`): a receiver that stops reading (the sender's peer advertises a zero window
for STALL_S), then reads everything, and an idle connection beside it. Prints one JSON
line: what each socket's own tcp_info says once the transfer is over."""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time

TOTAL = 1 << 20
# The receiver's pause. The window closes only once the sender has filled it (slow under
# QEMU's TCG), and the test wants polls that saw it closed >= 1 s apart: 1.6 left 0.99 s
# once in the 6.12 guest.
STALL_S = 2.5
# struct tcp_info (include/uapi/linux/tcp.h): (format, offset)
TCP_INFO = {"bytes_received": ("<Q", 128), "bytes_sent": ("<Q", 200), "bytes_retrans": ("<Q", 208)}


def tcp_info(s: socket.socket) -> dict[str, int]:
    raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return {name: int(struct.unpack_from(fmt, raw, off)[0]) for name, (fmt, off) in TCP_INFO.items()}


def ports(s: socket.socket) -> dict[str, int]:
    return {"sport": s.getsockname()[1], "dport": s.getpeername()[1]}


def main() -> None:
    lst = socket.socket()
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the accepted socket inherits it
    lst.bind(("127.0.0.1", 0))
    lst.listen()
    addr = lst.getsockname()
    sender = socket.create_connection(addr)
    receiver, _ = lst.accept()
    idle = socket.create_connection(addr)
    idle_peer, _ = lst.accept()
    idle.sendall(b"hello")
    assert idle_peer.recv(16) == b"hello"
    got = bytearray()

    def read_later() -> None:
        time.sleep(STALL_S)  # the window closes meanwhile: the sender's data waits
        while chunk := receiver.recv(65536):
            got.extend(chunk)
        receiver.sendall(b"ok")

    reader = threading.Thread(target=read_later)
    reader.start()
    sender.sendall(b"z" * TOTAL)
    sender.shutdown(socket.SHUT_WR)
    assert sender.recv(16) == b"ok"  # everything sent was read, so acknowledged
    reader.join()
    assert len(got) == TOTAL
    told = {
        "sender": {**ports(sender), **tcp_info(sender)},
        "idle": ports(idle),
        "netns": os.stat("/proc/self/ns/net").st_ino,
    }
    print(json.dumps(told), flush=True)
    time.sleep(0.3)  # a poll after the close of the sender's data: the states settle
    for s in (sender, receiver, idle, idle_peer, lst):
        s.close()


if __name__ == "__main__":
    sys.exit(main())
