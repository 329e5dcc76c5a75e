"""Traffic for tests/test_alerts_kernel_gaps.py, run inside the test's traced namespace B
(a veth pair joins it to namespace A, the "remote" side).

``python tests/alert_traffic_gaps.py run A_NS`` makes, in parallel and each on its own
ports: a TIME_WAIT pile-up toward one destination and a smaller one toward another
(K10), a process whose CLOSE_WAIT count keeps growing and one whose count stays level
(K10, both child processes), an idle connection a reject rule then resets (K3), TCP
segments far outside the receive window injected into two connections (K12 sequence
drops), UDP datagrams with a wrong checksum sent from A through a raw socket (K11),
UDP through a tiny token bucket on the veth (K12 saturation), and UDP into an
nftables drop rule whose rate jumps (K12 policy). Prints one JSON line of what it did.

The ports, addresses and the nftables set must match the test file (it creates the
namespaces, the table ``inet ntgaps``, the qdisc and the sysctls). Every loop is
bounded; every socket is closed before exit.
"""

from __future__ import annotations

import faulthandler
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from tests.packets import checksum, pseudo_header

HOST = "127.0.0.1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SELF = [sys.executable, "-m", "tests.alert_traffic_gaps"]  # from ROOT: it imports tests.packets
ADDR_A, ADDR_B, SPOOFED_A = "10.205.0.1", "10.205.0.2", "10.205.0.3"
TW_PORT, TW_CLEAN_PORT, TW_CONNECTS, TW_CLEAN_CONNECTS = 7210, 7211, 280, 150
LEAK_PORT, STEADY_PORT = 7220, 7221
IDLE_PORT, IDLE_S = 7230, 2.5  # the test's nft set `idle_reject` gets this port after the silence
SEQ_PORT, SEQ_CLEAN_PORT, SEQ_ROUNDS, SEQ_BAD, SEQ_CLEAN_BAD = 7240, 7241, 150, 5, 1
CSUM_PORT, CSUM_BAD, CSUM_GOOD, CSUM_SPOOFED_BAD = 7250, 15, 5, 10
SATURATION_PORT = 7260  # B -> A through the tbf on B's veth
POLICY_PORT = 7270  # dropped by the test's nft rule
TCP_REPAIR, TCP_REPAIR_QUEUE, TCP_QUEUE_SEQ, TCP_REPAIR_WINDOW = 19, 20, 21, 29  # linux/tcp.h
TCP_RECV_QUEUE, TCP_SEND_QUEUE = 1, 2


def listener(host: str, port: int, backlog: int = 256) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(backlog)
    return s


# --- K10 -------------------------------------------------------------------------------


def time_wait(port: int, connects: int) -> None:
    """The client closes first each time, so every client socket ends in TIME_WAIT. The
    client stays at most 32 connections ahead of the server's accept(): a starved server
    thread must not overflow the accept queue (the kernel would then fall back to SYN
    cookies and answer the stragglers with RSTs, and those handshakes never reach TIME_WAIT)."""
    srv = listener(HOST, port, backlog=1024)
    ahead = threading.Semaphore(32)

    def serve() -> None:
        for _ in range(connects):
            conn, _ = srv.accept()
            ahead.release()
            conn.settimeout(10)
            conn.recv(10)  # the client's FIN
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    for _ in range(connects):
        if not ahead.acquire(timeout=10):
            break  # the server is gone: the test's counts will say so
        c = socket.create_connection((HOST, port))
        c.close()
    t.join(30)
    srv.close()


def close_wait_children(seconds: float) -> list[subprocess.Popen[bytes]]:
    """Two processes: one leaks a CLOSE_WAIT socket every 0.4 s, one holds three, level."""
    return [subprocess.Popen([*SELF, which, str(seconds)], cwd=ROOT) for which in ("leak", "steady")]


def hold_close_waits(port: int, count: int, every: float, seconds: float) -> None:
    """Accept `count` connections whose clients close at once, never closing them here."""
    srv = listener(HOST, port)
    held = []
    end = time.monotonic() + seconds
    for _ in range(count):
        c = socket.create_connection((HOST, port))
        conn, _ = srv.accept()
        c.close()
        held.append(conn)
        time.sleep(every)
    time.sleep(max(0.0, end - time.monotonic()))
    for s in held:
        s.close()
    srv.close()


# --- K3 --------------------------------------------------------------------------------


def idle_reset() -> dict[str, object]:
    """A request/response, a silence, then the next request meets a reject rule: the RST
    comes back to the client in ESTABLISHED, as from a middlebox that forgot the flow."""
    srv = listener(HOST, IDLE_PORT)
    cli = socket.create_connection((HOST, IDLE_PORT))
    conn, _ = srv.accept()
    cli.sendall(b"ping")
    conn.recv(10)
    conn.sendall(b"pong")
    cli.recv(10)
    time.sleep(IDLE_S)
    subprocess.run(["nft", f"add element inet ntgaps idle_reject {{ {IDLE_PORT} }}"], check=True)
    cli.sendall(b"ping again")
    cli.settimeout(5)
    try:
        got = cli.recv(10)
        outcome = f"answered {got!r}"
    except ConnectionResetError:
        outcome = "reset"
    result = {"idle_client_port": cli.getsockname()[1], "idle_outcome": outcome}
    # the server aborts: a FIN would be retransmitted into the reject rule (the client's
    # RST answering it is rejected too), and its timeouts are not this scenario's
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    for s in (cli, conn, srv):
        s.close()
    return result


# --- K12 sequence ----------------------------------------------------------------------


def queue_seq(s: socket.socket, queue: int) -> int:
    s.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR_QUEUE, queue)
    return int(s.getsockopt(socket.IPPROTO_TCP, TCP_QUEUE_SEQ)) & 0xFFFFFFFF  # read as a signed int


def inject_out_of_window(port: int, rounds: int, bad: int, overwindow: int = 0) -> dict[str, object]:
    """Ping-pong `rounds` times, wait for the collector's counter report, then send `bad`
    segments with a sequence number 2^30 beyond the receiver's rcv_nxt from a raw socket
    (correct checksum): the receiver drops each with TCP_INVALID_SEQUENCE. Then
    `overwindow` segments starting exactly at the right edge of the receive window
    (rcv_wup + rcv_wnd): the sequence check lets them in (the queue is empty), the data
    path drops them with TCP_OVERWINDOW."""
    srv = listener(HOST, port)
    cli = socket.create_connection((HOST, port))
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn, _ = srv.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(rounds):
        cli.sendall(b"q" * 10)
        conn.recv(10)
        conn.sendall(b"r" * 10)
        cli.recv(10)
    time.sleep(3.0)  # a periodic flow_counters report (every second; later on a busy host) has the ping-pong
    conn.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 1)
    rcv_nxt, snd_nxt = queue_seq(conn, TCP_RECV_QUEUE), queue_seq(conn, TCP_SEND_QUEUE)
    _, _, _, rcv_wnd, rcv_wup = struct.unpack("5I", conn.getsockopt(socket.IPPROTO_TCP, TCP_REPAIR_WINDOW, 20))
    conn.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 0)
    cport = cli.getsockname()[1]
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    payload = b"x" * 10
    seqs = [rcv_nxt + (1 << 30) + 1000 * k for k in range(bad)] + [rcv_wup + rcv_wnd] * overwindow
    for seq in seqs:
        seq &= 0xFFFFFFFF
        header = struct.pack("!HHIIBBHHH", cport, port, seq, snd_nxt, 5 << 4, 0x10, 65535, 0, 0)
        csum = checksum(pseudo_header(HOST, HOST, socket.IPPROTO_TCP, len(header) + len(payload)) + header + payload)
        raw.sendto(header[:16] + struct.pack("!H", csum) + header[18:] + payload, (HOST, 0))
        time.sleep(0.02)
    raw.close()
    time.sleep(0.2)
    result = {f"seq_client_port_{port}": cport}
    for s in (cli, conn, srv):
        s.close()
    return result


# --- K11 (runs in namespace A) ---------------------------------------------------------


def udp_datagram(src: str, dst: str, sport: int, dport: int, payload: bytes, good: bool) -> bytes:
    length = 8 + len(payload)
    udp = struct.pack("!HHHH", sport, dport, length, 0)
    csum = checksum(pseudo_header(src, dst, socket.IPPROTO_UDP, length) + udp + payload) or 0xFFFF
    if not good:
        csum = csum ^ 0x5A5A or 1  # wrong, and never 0 (0 means "no checksum" in IPv4)
    udp = udp[:6] + struct.pack("!H", csum)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + length, 0, 0x4000, 64, socket.IPPROTO_UDP, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))  # fmt: skip
    return ip + udp + payload


def send_bad_checksums() -> None:
    """From A: 15 bad and 5 good datagrams from 10.205.0.1, 10 bad from 10.205.0.3 (spoofed)."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)  # IP_HDRINCL implied
    plan = [(ADDR_A, False)] * CSUM_BAD + [(ADDR_A, True)] * CSUM_GOOD + [(SPOOFED_A, False)] * CSUM_SPOOFED_BAD
    for src, good in plan:
        raw.sendto(udp_datagram(src, ADDR_B, 40000, CSUM_PORT, b"c" * 32, good), (ADDR_B, 0))
        time.sleep(0.005)
    raw.close()


def bad_checksums(ns_a: str) -> dict[str, object]:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind((ADDR_B, CSUM_PORT))
    rx.settimeout(0.5)
    subprocess.run(["ip", "netns", "exec", ns_a, *SELF, "csum"], check=True, timeout=30, cwd=ROOT)
    received = 0
    for _ in range(CSUM_BAD + CSUM_GOOD + CSUM_SPOOFED_BAD):
        try:
            rx.recv(100)
            received += 1
        except TimeoutError:
            break
    rx.close()
    return {"csum_received": received}


# --- K12 saturation and policy ---------------------------------------------------------


def paced_udp(dst: tuple[str, int], per_second: int, seconds: float, batches: int = 10) -> tuple[int, int]:
    """Send `per_second` datagrams a second in `batches` batches a second; returns how many
    were sent and from which port."""
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("0.0.0.0", 0))
    batch = max(1, per_second // batches)
    sent = 0
    start = time.monotonic()
    for k in range(int(seconds * batches)):
        for _ in range(batch):
            try:
                tx.sendto(b"s" * 1000, dst)
                sent += 1
            except OSError:  # ENOBUFS from a full qdisc, when reported
                sent += 1
        time.sleep(max(0.0, start + (k + 1) / batches - time.monotonic()))
    port = tx.getsockname()[1]
    tx.close()
    return sent, port


def saturation() -> dict[str, object]:
    return {"saturation_sent": paced_udp((ADDR_A, SATURATION_PORT), 400, 3.5)[0]}


def policy_jump() -> dict[str, object]:
    low, _ = paced_udp((HOST, POLICY_PORT), 5, 5.0, batches=5)  # 5 a second: under policy_min_rate
    high, port = paced_udp((HOST, POLICY_PORT), 500, 3.0)
    return {"policy_low": low, "policy_high": high, "policy_high_port": port}


def run_all(ns_a: str) -> None:
    out: dict[str, object] = {"pid": os.getpid()}
    children = close_wait_children(6.0)
    out.update(leak_pid=children[0].pid, steady_pid=children[1].pid)
    lock = threading.Lock()

    def job(fn: Callable[[], dict[str, object] | None]) -> Callable[[], None]:
        def go() -> None:
            got = fn()
            if got:
                with lock:
                    out.update(got)

        return go

    jobs: list[Callable[[], dict[str, object] | None]] = [
        lambda: time_wait(TW_PORT, TW_CONNECTS),
        lambda: time_wait(TW_CLEAN_PORT, TW_CLEAN_CONNECTS),
        idle_reset,
        lambda: inject_out_of_window(SEQ_PORT, SEQ_ROUNDS, SEQ_BAD),
        lambda: inject_out_of_window(SEQ_CLEAN_PORT, SEQ_ROUNDS, SEQ_CLEAN_BAD, overwindow=1),
        lambda: bad_checksums(ns_a),
        saturation,
        policy_jump,
    ]
    threads = [threading.Thread(target=job(j), daemon=True) for j in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for p in children:
        p.wait(timeout=30)
    print(json.dumps(out))


def main(argv: list[str]) -> None:
    faulthandler.dump_traceback_later(60, exit=True)  # a hard bound on the whole run
    if argv[0] == "run":
        run_all(argv[1])
    elif argv[0] == "leak":
        seconds = float(argv[1])
        hold_close_waits(LEAK_PORT, int(seconds / 0.4), 0.4, seconds + 1.5)
    elif argv[0] == "steady":
        hold_close_waits(STEADY_PORT, 3, 0.05, float(argv[1]) + 1.5)
    elif argv[0] == "csum":
        send_bad_checksums()
    else:
        raise SystemExit(f"unknown scenario {argv[0]}")


if __name__ == "__main__":
    main(sys.argv[1:])
