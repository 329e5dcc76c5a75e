"""Traffic for tests/test_alerts_kernel_more.py, run inside the test's network namespace:
a half-close the peer never answers (FIN_WAIT_2), handshakes whose final ACK nftables
drops (SYN-ACK retries), and data into a receive window forced shut (TCP_ZEROWINDOW).

The ports here must match the nftables rule and the assertions of that test file.
Prints one JSON line with what it did, which the test compares with the alerts.
"""

from __future__ import annotations

import faulthandler
import json
import os
import socket
import struct
import sys
import time

HOST = "127.0.0.1"
FIN_WAIT2_PORT = 7120
SYNACK_PORT = 7130  # the test's nft rule drops pure ACKs to this port (the final handshake ACK)
ZEROWIN_PORT = 7140
TCP_REPAIR = 19  # linux/tcp.h
TCP_REPAIR_WINDOW = 29


def listener(port: int, backlog: int = 64) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((HOST, port))
    s.listen(backlog)
    return s


def half_close(port: int = FIN_WAIT2_PORT) -> list[socket.socket]:
    """The client shuts down its sending side; the server never closes, so no FIN comes
    back and the client sits in FIN_WAIT_2 (not orphaned: tcp_fin_timeout does not apply)."""
    srv = listener(port)
    cli = socket.create_connection((HOST, port))
    conn, _ = srv.accept()
    cli.shutdown(socket.SHUT_WR)
    return [cli, conn, srv]


def lost_final_acks(port: int = SYNACK_PORT, clients: int = 10, hold: float = 2.5) -> dict[str, object]:
    """Clients whose final handshake ACK is dropped: the server keeps the requests in
    SYN_RECEIVED and resends SYN-ACKs (first after about 1 s). Closed with RST (SO_LINGER 0)
    so no FIN|ACK completes the handshakes afterwards."""
    srv = listener(port)
    socks = []
    for _ in range(clients):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex((HOST, port))
        socks.append(c)
    time.sleep(hold)
    ports = sorted(c.getsockname()[1] for c in socks)
    for c in socks:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        c.close()
    srv.close()
    return {"synack_clients": ports}


def zero_window_drop(port: int = ZEROWIN_PORT) -> dict[str, object]:
    """The receiver's window is set to zero behind the sender's back (TCP_REPAIR_WINDOW, root):
    the sender still believes it open, so its next data segment lands on a zero window and
    the kernel drops it with reason TCP_ZEROWINDOW. Repair mode is left after the drop; the
    sender's retransmission is then accepted and read."""
    srv = listener(port)
    cli = socket.create_connection((HOST, port))
    conn, _ = srv.accept()
    time.sleep(0.1)  # the handshake's last ACK processed: rcv_wup == rcv_nxt
    conn.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 1)
    win = list(struct.unpack("5I", conn.getsockopt(socket.IPPROTO_TCP, TCP_REPAIR_WINDOW, 20)))
    win[3] = 0  # rcv_wnd
    conn.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_WINDOW, struct.pack("5I", *win))
    cli.sendall(b"w" * 100)
    time.sleep(0.05)
    conn.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 0)
    conn.settimeout(5)
    got = conn.recv(1000)
    result = {"zerowin_client_port": cli.getsockname()[1], "zerowin_received": len(got)}
    cli.close()
    conn.close()
    srv.close()
    return result


def main(hold: float) -> None:
    faulthandler.dump_traceback_later(30, exit=True)  # a hard bound on the whole run
    start = time.monotonic()
    held = half_close()
    out: dict[str, object] = {"pid": os.getpid(), "fin_wait2_client_port": held[0].getsockname()[1]}
    out.update(lost_final_acks())
    out.update(zero_window_drop())
    time.sleep(max(0.0, hold - (time.monotonic() - start)))  # FIN_WAIT_2 outlasts the configured limit
    for s in held:
        s.close()
    print(json.dumps(out))


if __name__ == "__main__":
    main(float(sys.argv[1]))
