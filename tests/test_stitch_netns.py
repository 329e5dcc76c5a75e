"""Both ends stitched for real (issue 19 item 6): two network namespaces joined by veth, one
collector in each with its own host id and token, shipping to one webapp.

A client in namespace A sends data to a server in namespace B, which answers; A closes
first, then B. Each collector traces only its namespace (`--filter netns=`), so each
host has exactly its own half. The webapp must show the connection once with both
halves -- from either side's page the same pair, opener A first; one row in the
Connections list, each host's own under its host filter -- and estimate the
offset between the two collectors' wall clocks within its stated bound. Both
collectors run on one kernel, so the true offset is known exactly: each record
carries the shared CLOCK_MONOTONIC (ts_ns) beside its collector's wall time, and
ts_wall - ts_ns differs between the two only by the collectors' own wall offsets.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from daphne_server import Server, running_webapp

from tests.kernel_support import kernel
from tests.veth_lab import Lab, veth_lab

REPO = Path(__file__).resolve().parents[1]
HOSTS = ("ns-a", "ns-b")
PORT = 47123
SIZE = 200_000
pytestmark = [*kernel, pytest.mark.slow]


@pytest.fixture
def server() -> Iterator[Server]:
    with running_webapp(host=HOSTS[0]) as srv:
        srv.tokens = {HOSTS[0]: srv.token, HOSTS[1]: srv.make_token(HOSTS[1])}  # type: ignore[attr-defined]
        yield srv


def start_collector(server: Server, host: str, netns: int, tmp: Path) -> subprocess.Popen[str]:
    token_file = tmp / f"{host}.token"
    token_file.write_text(server.tokens[host] + "\n")  # type: ignore[attr-defined]
    token_file.chmod(0o600)
    command = [
        *(sys.executable, "-m", "nettrail.cli", "collect", "--server", server.url, "--token-file", str(token_file)),
        *(
            "--providers",
            "tcp,siftr",
            "--ppl",
            "1",
            "--filter",
            f"netns={netns}",
            "--spool",
            str(tmp / f"{host}.spool"),
        ),
    ]
    env = {**os.environ, "NETTRAIL_HOST_ID": host, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 90
    line = ""
    while time.monotonic() < deadline and "tracing" not in line:
        line = proc.stderr.readline()
        assert line, f"collect ({host}) ended before tracing"
    return proc


def talk(lab: Lab) -> None:
    """A sends SIZE bytes, B echoes a short answer; A closes first, then B."""
    listener = lab.socket(lab.b, socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((lab.addr_b, PORT))
    listener.listen()
    received: list[int] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            total = 0
            while total < SIZE:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                total += len(chunk)
            conn.sendall(b"thanks")
            assert conn.recv(10) == b""  # A's FIN first
            received.append(total)
        listener.close()

    thread = threading.Thread(target=serve)
    thread.start()
    client = lab.socket(lab.a, socket.AF_INET, socket.SOCK_STREAM)
    client.settimeout(20)
    client.connect((lab.addr_b, PORT))
    client.sendall(b"x" * SIZE)
    assert client.recv(10) == b"thanks"
    client.close()
    thread.join(20)
    assert received == [SIZE]


def true_offset(server: Server, host_a: str, host_b: str) -> float:
    """(ts_wall - ts_ns) of B minus that of A: both collectors share the kernel's monotonic clock."""
    code = (
        "import django, json, sys; django.setup()\n"
        "from webapp.traces.models import KIND_MODELS\n"
        "m = KIND_MODELS['tcp_state']\n"
        "print(json.dumps({h: [(r.ts_wall, r.ts_ns) for r in m.objects.filter(host_id=h)[:1]][0] for h in sys.argv[1:]}))\n"
    )
    import json

    got = json.loads(server.run("-c", code, host_a, host_b).strip().splitlines()[-1])
    (wall_a, ns_a), (wall_b, ns_b) = got[host_a], got[host_b]
    return (wall_b - ns_b / 1e9) - (wall_a - ns_a / 1e9)


def test_two_namespaces_two_collectors_one_connection_with_both_halves(server: Server, tmp_path: Path) -> None:
    with veth_lab(gro=False) as lab:
        netns_a = os.stat(f"/run/netns/{lab.a}").st_ino
        collectors = [
            start_collector(server, "ns-a", netns_a, tmp_path),
            start_collector(server, "ns-b", lab.netns_b, tmp_path),
        ]
        try:
            talk(lab)
            time.sleep(1.0)  # B's last ACK and the TIME_WAIT inference reach the collectors
        finally:
            for proc in collectors:
                proc.terminate()  # drains, flushes its sink
            errors = [proc.communicate(timeout=60)[1] for proc in collectors]
    assert [proc.returncode for proc in collectors] == [0, 0], errors

    http = requests.Session()
    http.headers["Cookie"] = server.session_cookie()
    rows: list[dict[str, Any]] = []
    for _ in range(60):  # at most 30 s for the last batches: a bound, not a speed expectation
        answer = http.get(f"{server.url}/api/connections", params={"port": PORT, "limit": 100}, timeout=10)
        found = answer.json()["connections"]  # B's listening socket is a row too: no peer address
        rows = sorted((r for r in found if r["dst"] is not None), key=lambda r: r["host_id"])
        if len(rows) == 2 and all(r["closed"] for r in rows):
            break
        time.sleep(0.5)
    assert [(r["host_id"], r["src"], r["dst"], r["dport"] if r["host_id"] == "ns-a" else r["sport"]) for r in rows] == [
        ("ns-a", lab.addr_a, lab.addr_b, PORT),
        ("ns-b", lab.addr_b, lab.addr_a, PORT),
    ]
    a_uuid, b_uuid = rows[0]["conn_uuid"], rows[1]["conn_uuid"]

    def stitched(uuid: str, host: str) -> Any:
        answer = http.get(f"{server.url}/api/dash/connections/{uuid}/stitched", params={"host": host}, timeout=30)
        assert answer.status_code == 200, answer.text
        return answer.json()

    from_a, from_b = stitched(a_uuid, "ns-a"), stitched(b_uuid, "ns-b")
    pair = [(h["name"], h["host"], h["conn_uuid"], h["opener"]) for h in from_a["halves"]]
    assert pair == [("A", "ns-a", a_uuid, True), ("B", "ns-b", b_uuid, False)]
    assert [(h["host"], h["conn_uuid"]) for h in from_b["halves"]] == [("ns-a", a_uuid), ("ns-b", b_uuid)]
    assert (from_a["this"], from_b["this"]) == ("A", "B")
    assert all(h["counts"]["siftr"] > 0 and h["counts"]["states"] >= 3 for h in from_a["halves"])

    clock = from_a["clock"]
    assert (clock["same_clock"], clock["aligned"], clock["consistent"]) == (False, True, True), clock
    assert clock["pairs"]["a_to_b"] >= 2 and clock["pairs"]["b_to_a"] >= 2, clock
    truth = true_offset(server, "ns-a", "ns-b")
    slack = 2e-6  # ts_wall is a float of seconds near 1.8e9: about 0.24 us per step, twice per bound
    assert clock["lower_s"] - slack <= truth <= clock["upper_s"] + slack, (truth, clock)
    assert abs(clock["offset_s"] - truth) <= clock["error_s"] + slack, (truth, clock)
    print(f"offset {clock['offset_s'] * 1e6:.1f} us ± {clock['error_s'] * 1e6:.1f} us, true {truth * 1e6:.1f} us")

    page = http.get(f"{server.url}/connections/{a_uuid}/", params={"host": "ns-a"}, timeout=30).text
    assert 'id="stitched"' in page and f'href="/connections/{b_uuid}/?host=ns-b"' in page

    # The Connections list shows the connection once (A's row, naming B's half); B's host
    # filter shows B's own row. Rows without a peer address (B's listener) are left aside.
    def listed(q: str) -> tuple[list[tuple[str, str, str | None]], int]:
        params = {"q": q, "limit": 100}
        body = http.get(f"{server.url}/api/dash/connections", params=params, timeout=30).json()
        ends = [(c["host_id"], c["conn_uuid"], c["peer"] and c["peer"]["conn_uuid"]) for c in body["rows"]]
        return [e for e, c in zip(ends, body["rows"], strict=True) if c["dst"] is not None], body["folded"]

    assert listed(f"port {PORT}") == ([("ns-a", a_uuid, b_uuid)], 1)
    assert listed(f"host ns-b and port {PORT}") == ([("ns-b", b_uuid, None)], 0)
