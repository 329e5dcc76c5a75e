"""Issue 34 item 2 on real sockets: a UDP receive-buffer overflow is one K11 finding naming
the socket, its buffer size and its reader's pace, each number equal to the kernel's own.

A receiver in one namespace (SO_RCVBUF 4096: the kernel makes it 8192) reads a datagram every
20 ms for 3 s; a sender in another, over a veth pair, sends 1,000 datagrams in 20 bursts.
One `nettrail collect --providers udp,skb --alerts` filtered to the port runs around it.
Dropped = the receiver namespace's UdpRcvbufErrors, read = its UdpInDatagrams, arrived = the
datagrams sent, the buffer = `ss -uamn`'s rb and SO_RCVBUF. About 15 s.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

from tests.alert_kernel_support import KERNEL_ALERTS, stop
from tests.collect_process import Collector
from tests.kernel_support import free_port
from tests.veth_lab import veth_lab
from translators.records import Alert, SockEvent, from_json

pytestmark = KERNEL_ALERTS
SENT = 1000
RULES = "[engine]\nupdate_interval_s = 1\n"


def ns_run(ns: str, *args: str) -> str:
    return subprocess.run(["ip", "netns", "exec", ns, *args], capture_output=True, text=True, check=True).stdout


def nstat(ns: str, name: str) -> int:
    for line in ns_run(ns, "nstat", "-az", name).splitlines()[1:]:
        return int(line.split()[1])
    raise AssertionError(f"no {name}")


def slow_reader(sock: socket.socket, seconds: float) -> None:
    sock.settimeout(0.5)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            sock.recv(2048)
        except TimeoutError:
            pass
        time.sleep(0.02)


def test_a_udp_socket_whose_buffer_overflows_is_one_k11_finding_with_its_buffer_and_its_readers_pace(
    tmp_path: Path,
) -> None:
    rules, out = tmp_path / "rules.toml", tmp_path / "out.jsonl"
    rules.write_text(RULES)
    port = free_port()
    with veth_lab(gro=False) as lab:
        col = Collector(
            "--providers", "udp,skb", "--filter", f"port={port}", "--alerts", "--rules", str(rules), "--out", str(out)
        )  # fmt: skip
        rcv = lab.socket(lab.b, socket.AF_INET, socket.SOCK_DGRAM)
        snd = lab.socket(lab.a, socket.AF_INET, socket.SOCK_DGRAM)
        try:
            col.wait_attached(timeout=120)
            time.sleep(1.0)
            rcv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            rcv.bind((lab.addr_b, port))
            reader = threading.Thread(target=slow_reader, args=(rcv, 3.0))
            reader.start()
            for i in range(SENT):
                snd.sendto(b"x" * 200, (lab.addr_b, port))
                if i % 50 == 49:
                    time.sleep(0.05)
            reader.join()
            rb = ns_run(lab.b, "ss", "-Huamn", f"sport = :{port}").split("skmem:(")[1].split(",")[1]
            time.sleep(1.5)
            dropped, read = nstat(lab.b, "UdpRcvbufErrors"), nstat(lab.b, "UdpInDatagrams")
        finally:
            code, _, err = stop(col, timeout=60)
            rcvbuf = rcv.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
            rcv.close()
            snd.close()
    assert code == 0, err
    assert rb == f"rb{rcvbuf}" and rcvbuf == 8192
    assert dropped > SENT // 2 and read > 0
    records = [from_json(line) for line in out.read_bytes().splitlines()]
    last = [r for r in records if isinstance(r, SockEvent) and r.probe == "udp-fail-queue"][-1]
    k11 = [r for r in records if isinstance(r, Alert) and r.rule_id == "K11" and r.sport == port]
    assert {a.alert_id for a in k11} == {k11[0].alert_id}  # one finding, all its versions
    a = k11[-1]
    comm, pid = Path("/proc/self/comm").read_text().strip(), os.getpid()
    assert (a.condition, a.src, a.sport, a.tgid, a.comm, a.proto) == ("rcvbuf", lab.addr_b, port, pid, comm, "udp")
    assert a.conn_uuid == last.conn_uuid and a.metric == dropped / SENT
    assert a.message == (
        f"UDP socket {lab.addr_b}:{port} of {comm} (pid {pid}) dropped {dropped} of the {SENT} datagrams that "
        f"arrived in 10 s ({dropped / SENT:.1%}) because its receive buffer was full: the buffer holds {rcvbuf} "
        f"bytes (sk_rcvbuf, from SO_RCVBUF or net.core.rmem_default), {last.rmem_alloc} in use at the last drop, a "
        f"datagram taking {last.truesize} with its overhead. Its reader took {read} datagrams in that time "
        f"({read / 10:.1f} a second) while they arrived at {SENT / 10:.1f} a second. UDP has no retransmission, so "
        f"this is application data lost: read faster (or from more threads), or raise SO_RCVBUF / net.core.rmem_max."
    )
