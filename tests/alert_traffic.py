"""Traffic for the kernel alert tests, run inside the test's network namespace.

``python tests/alert_traffic.py faults`` makes, on 127.0.0.1 of the namespace, one
instance of each fault the kernel rules look for (a tc token bucket on the namespace's
lo for queueing delay, removed again); ``clean`` makes healthy traffic
only. Ports are fixed (the namespace is the test's own); the nftables table
``inet ntalerts`` must exist (the test creates it: loss on port 7600, a drop set for
7300 and 7700). Prints one JSON line of facts (pids, ports) for the assertions.
Every loop is bounded; every socket is closed before exit.
"""

from __future__ import annotations

import errno
import faulthandler
import json
import os
import socket
import subprocess
import sys
import threading
import time

HOST = "127.0.0.1"


def listener(port: int, backlog: int = 64, rcvbuf: int | None = None) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((HOST, port))
    s.listen(backlog)
    return s


def nft(command: str) -> None:
    subprocess.run(["nft", command], check=True)


def close_wait(port: int = 7100) -> tuple[socket.socket, socket.socket]:
    """The client closes; the server never does (until the end): CLOSE_WAIT."""
    srv = listener(port)
    cli = socket.create_connection((HOST, port))
    conn, _ = srv.accept()
    cli.close()
    srv.close()
    return conn, cli


def closed_ports() -> None:
    """25 refused connects to port 9, then one each to 15 more closed ports."""
    for port in [9] * 25 + list(range(9001, 9016)):
        s = socket.socket()
        try:
            s.connect((HOST, port))
        except ConnectionRefusedError:
            pass
        finally:
            s.close()


def syn_scan(addr: str = "127.0.0.2", port: int = 9, attempts: int = 270) -> None:
    """A burst of connection attempts nobody answers but with RST: a SYN scan's shape."""
    for _ in range(attempts):
        s = socket.socket()
        try:
            s.connect((addr, port))
        except ConnectionRefusedError:
            pass
        finally:
            s.close()


def stuck_connect(port: int = 7300, hold: float = 2.5) -> None:
    """SYNs to a port whose packets nftables drops: SYN_SENT, SYN retries, then give up."""
    s = socket.socket()
    s.setblocking(False)
    assert s.connect_ex((HOST, port)) == errno.EINPROGRESS
    time.sleep(hold)
    s.close()


def full_backlog(port: int = 7400, clients: int = 8, hold: float = 2.5) -> None:
    """A listener with backlog 1 that never accepts: later SYNs are dropped and retried."""
    srv = listener(port, backlog=1)
    socks = []
    for _ in range(clients):
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex((HOST, port))
        socks.append(c)
    time.sleep(hold)
    for c in socks:
        c.close()
    srv.close()


def slow_reader(port: int = 7500, hold: float = 2.5) -> None:
    """The receiver never reads: its window closes, the sender sees a zero window."""
    srv = listener(port, rcvbuf=4096)
    cli = socket.create_connection((HOST, port))
    conn, _ = srv.accept()
    cli.setblocking(False)
    chunk = b"x" * 65536
    end = time.monotonic() + hold
    while time.monotonic() < end:
        try:
            cli.send(chunk)
        except BlockingIOError:
            time.sleep(0.05)
    cli.close()
    conn.close()
    srv.close()


def bulk(port: int, seconds: float) -> int:
    """Send for `seconds` while a reader thread drains; returns the bytes received."""
    srv = listener(port)
    cli = socket.create_connection((HOST, port))
    cli.settimeout(20)  # a send blocked by a blackout resumes once it lifts; never forever
    conn, _ = srv.accept()
    conn.settimeout(30)
    received = [0]

    def reader() -> None:
        while True:
            data = conn.recv(1 << 20)
            if not data:
                return
            received[0] += len(data)

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    chunk = b"y" * 16384
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        cli.sendall(chunk)
    cli.shutdown(socket.SHUT_WR)
    t.join(30)
    cli.close()
    conn.close()
    srv.close()
    return received[0]


def blackout_bulk(port: int = 7700, table: str = "ntalerts", length: float = 3.0, seconds: float = 4.5) -> None:
    """A bulk transfer whose port joins the nft set `blackout` of `inet <table>` for `length`
    seconds from 0.5 s in (the set's drop rule: RTOs, cwnd back to 1 segment)."""
    on = threading.Timer(0.5, nft, (f"add element inet {table} blackout {{ {port} }}",))
    off = threading.Timer(0.5 + length, nft, (f"delete element inet {table} blackout {{ {port} }}",))
    on.start()
    off.start()
    bulk(port, seconds)
    on.join()
    off.join()


def lossy_bulk() -> None:
    """10 % random loss on port 7600 (the nft rule), then a 3 s blackout on 7700 (>= 3 RTOs)."""
    bulk(7600, 2.5)
    blackout_bulk()


def request_response(port: int = 7900, n: int = 200) -> None:
    srv = listener(port, backlog=256)

    def serve() -> None:
        for _ in range(n):
            conn, _ = srv.accept()
            conn.recv(100)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            conn.recv(100)  # the client's FIN
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    for _ in range(n):
        c = socket.create_connection((HOST, port))
        c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        c.recv(100)
        c.close()
    t.join(30)
    srv.close()


def keepalive(port: int = 8000, seconds: float = 4.0) -> None:
    srv = listener(port)
    cli = socket.create_connection((HOST, port))
    conn, _ = srv.accept()
    cli.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    time.sleep(seconds)
    cli.close()
    conn.close()
    srv.close()


def queueing(port: int = 7200, pings: int = 40, seconds: float = 2.0) -> None:
    """Ping-pong first (a low srtt baseline), then a bulk send through a 4 Mbit/s token
    bucket on lo (tc tbf, not netem): the queue it builds raises the srtt far above it
    (200 ms of queue is 100 KB at this rate, well inside the 2 s; at 8 Mbit/s a CI run
    once peaked at 114 ms). Segments of 1448 bytes (TCP_MAXSEG), not lo's 64 KB: at this
    rate those are a few a second, and the srtt samples then peaked anywhere from 160 to
    600 ms (a run under 200 ms missed K7's critical line); small ones peak at 560-610 ms."""
    srv = listener(port)
    cli = socket.socket()
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)
    cli.connect((HOST, port))
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn, _ = srv.accept()
    conn.settimeout(20)
    for _ in range(pings):
        cli.sendall(b"p")
        conn.recv(16)
        conn.sendall(b"q")
        cli.recv(16)
    subprocess.run(["tc", "qdisc", "add", "dev", "lo", "root", "tbf", "rate", "4mbit", "burst", "256kb",
                    "latency", "400ms"], check=True)  # fmt: skip
    try:
        stop = threading.Event()

        def drain() -> None:
            while not stop.is_set():
                try:
                    conn.recv(1 << 16)
                except OSError:
                    return

        t = threading.Thread(target=drain, daemon=True)
        t.start()
        cli.settimeout(10)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            cli.send(b"z" * 16384)
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", "lo", "root"], check=True)
    stop.set()
    cli.close()
    conn.close()
    srv.close()


def udp_overflow(port: int = 7010, datagrams: int = 200) -> None:
    """A UDP socket with a tiny receive buffer that never reads: SOCKET_RCVBUFF drops."""
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    rx.bind((HOST, port))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(datagrams):
        tx.sendto(b"x" * 1000, (HOST, port))
    tx.close()
    rx.close()


def udp_closed(port: int = 7011, datagrams: int = 120) -> None:
    """Datagrams to a port with no socket: NO_SOCKET drops (over 100 a minute)."""
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(datagrams):
        tx.sendto(b"y", (HOST, port))
    tx.close()


def run_parallel(*jobs) -> None:
    threads = [threading.Thread(target=j, daemon=True) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        print(f"{t.name} done", file=sys.stderr, flush=True)


def main(which: str) -> None:
    # a hard bound on the whole run: print every thread's stack and exit if anything hangs
    faulthandler.dump_traceback_later(60, exit=True)
    if which == "faults":
        held, client = close_wait()
        closed_ports()
        syn_scan()
        udp_overflow()
        udp_closed()
        queueing()  # alone: its token bucket slows all of lo
        run_parallel(stuck_connect, full_backlog, slow_reader, lossy_bulk)
        held.close()
        client.close()
    elif which == "burst":
        bulk(7800, 1.0)
    elif which == "clean":
        run_parallel(lambda: bulk(7800, 2.0), request_response, keepalive)
    else:
        raise SystemExit(f"unknown scenario {which}")
    print(json.dumps({"pid": os.getpid()}))


if __name__ == "__main__":
    main(sys.argv[1])
