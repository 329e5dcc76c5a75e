"""Test traffic for K4: a listener with backlog 1 that never accepts, flooded with connects.

Usage: listen_flood.py PORT CONNECTS HOLD_S. Run inside the test's network namespace."""

from __future__ import annotations

import socket
import sys
import time


def main(port: int, connects: int, hold: float) -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(1)
    clients = []
    for _ in range(connects):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        clients.append(c)
    time.sleep(hold)  # SYN retries at 1 s keep overflowing the full queue
    for c in clients:
        c.close()
    listener.close()


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
