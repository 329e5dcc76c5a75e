"""Test traffic for the netns filter: inside the test's network namespace, a loopback
connection whose data is dropped at input by nftables for HOLD_S seconds, so the sender's
retransmission timer fires (RTO retransmits and the Loss state, in timer context), and
a connect to PORT+1 whose SYN is dropped (a SYN retransmission from the timer).

Usage: netns_rto.py PORT HOLD_S. Creates and deletes the nft table `nettrail_rto`
of this namespace; prints the bytes the receiver got."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

TABLE = "nettrail_rto"


def nft(*args: str) -> None:
    subprocess.run(["nft", *args], check=True)


def main(port: int, hold: float) -> None:
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
        start = time.monotonic()
        client.sendall(b"x" * 20000)
        syn = socket.socket()
        syn.settimeout(min(hold, 1.3))  # its SYN is dropped: one SYN retransmission at 1 s
        try:
            syn.connect(("127.0.0.1", port + 1))
        except OSError:
            pass
        syn.close()
        time.sleep(max(0.0, hold - (time.monotonic() - start)))  # retransmission timer: ~0.2, 0.6, 1.4 s
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
    main(int(sys.argv[1]), float(sys.argv[2]))
