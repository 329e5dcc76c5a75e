"""Test traffic for the netns filter: inside the test's network namespace, a loopback
connection whose data is dropped at input by nftables until the sender's retransmission
timer has fired twice (RTO retransmits and the Loss state, in timer context), and a
connect to PORT+1 whose SYN is dropped until it has been retransmitted once (a SYN
retransmission from the timer).

The drop lasts until the kernel says so (TCP_INFO), not for a fixed time: on a busy
machine timers run late, and a fixed hold could end before they fire. Bounded by
DEADLINE_S; past it the script fails naming what the kernel had not done.

Usage: netns_rto.py PORT. Creates and deletes the nft table `nettrail_rto` of this
namespace; prints the bytes the receiver got."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

TABLE = "nettrail_rto"
DEADLINE_S = 30.0
TCP_CA_LOSS = 4  # tcpi_ca_state


def nft(*args: str) -> None:
    subprocess.run(["nft", *args], check=True)


def timer_state(sock: socket.socket) -> tuple[int, int]:
    """(tcpi_ca_state, tcpi_retransmits): the second counts retransmission-timer
    firings since the last ACK, SYN retransmissions included."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    return info[1], info[2]


def main(port: int) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    client = socket.create_connection(("127.0.0.1", port))
    server, _ = listener.accept()
    nft("add", "table", "inet", TABLE)
    try:
        nft("add", "chain", "inet", TABLE, "in", "{ type filter hook input priority 0 ; }")
        nft("add", "rule", "inet", TABLE, "in", "tcp", "dport", str(port), "drop")
        nft("add", "rule", "inet", TABLE, "in", "tcp", "dport", str(port + 1), "drop")
        client.sendall(b"x" * 20000)
        syn = socket.socket()
        syn.setblocking(False)
        syn.connect_ex(("127.0.0.1", port + 1))  # EINPROGRESS: its SYN is dropped
        deadline = time.monotonic() + DEADLINE_S
        while True:
            ca_state, data_timeouts = timer_state(client)
            _, syn_timeouts = timer_state(syn)
            if ca_state == TCP_CA_LOSS and data_timeouts >= 2 and syn_timeouts >= 1:
                break
            if time.monotonic() > deadline:
                sys.exit(
                    f"after {DEADLINE_S:.0f} s: data timer fired {data_timeouts} times (ca_state {ca_state}),"
                    f" SYN retransmitted {syn_timeouts} times"
                )
            time.sleep(0.02)
        syn.close()
    finally:
        nft("delete", "table", "inet", TABLE)
    got = 0
    server.settimeout(10)
    while got < 20000:
        chunk = server.recv(65536)
        if not chunk:
            break
        got += len(chunk)
    for s in (client, server, listener):
        s.close()
    print(got)


if __name__ == "__main__":
    main(int(sys.argv[1]))
