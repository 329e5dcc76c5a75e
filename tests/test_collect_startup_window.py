"""No record made after the collector says "tracing" is lost on the way to the database: short TCP
connections made at once after that line, shipped by `nettrail collect --server` to a real daphne,
all appear in /api/connections, with the collector's own loss counters at zero.

`nettrail up` runs this same pair (tests/test_nettrail_up.py drives it whole, where the kernel
loads its default provider set); here the providers are tcp,siftr,skb so the test runs on every
kernel the tcp tests run on.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from daphne_server import Server, running_webapp

from tests.kernel_support import kernel, short_connections

REPO = Path(__file__).resolve().parents[1]
CONNECTIONS = 20
SIZE = 10_000
pytestmark = [*kernel, pytest.mark.slow]


@pytest.fixture
def server() -> Iterator[Server]:
    with running_webapp(prefix="nettrail-window-", host=socket.gethostname()) as srv:
        yield srv


def test_connections_made_right_after_tracing_all_reach_the_database(server: Server, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(server.token + "\n")
    token_file.chmod(0o600)
    command = [
        *(sys.executable, "-m", "nettrail.cli", "collect", "--server", server.url, "--token-file", str(token_file)),
        *("--alerts", "--ppl", "8", "--providers", "tcp,siftr,skb", "--spool", str(tmp_path / "spool")),
    ]
    proc = subprocess.Popen(command, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 90
        line = ""
        while time.monotonic() < deadline and "tracing" not in line:
            line = proc.stderr.readline()
            assert line, "collect ended before tracing"
        target = short_connections(CONNECTIONS, SIZE)  # at once after the line
        http = requests.Session()
        http.headers["Cookie"] = server.session_cookie()
        rows: list[dict[str, object]] = []
        for _ in range(120):  # at most 60 s: a bound, not a speed expectation
            answer = http.get(f"{server.url}/api/connections", params={"port": target, "limit": 100}, timeout=10)
            rows = [r for r in answer.json()["connections"] if r["dport"] == target]
            if sum(1 for r in rows if r["closed"]) >= CONNECTIONS:
                break
            time.sleep(0.5)
        assert len(rows) == CONNECTIONS and all(r["closed"] for r in rows), rows
        assert sorted({r["bytes_out"] for r in rows}) == [SIZE]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "lost 0" in err, err
