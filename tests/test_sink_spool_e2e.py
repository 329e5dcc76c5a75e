"""The HTTP sink against the real webapp (daphne, SQLite): kill the server mid-stream, keep
writing, restart it -- every record is stored exactly once. Also `analyze --server`.

The server is `daphne webapp.asgi:application` as the test's own user (the venv's
interpreter may live under /root, out of an unprivileged user's reach; `nettrail up`
is what drops privileges, tested with it), on a free port, with its own NETTRAIL_DATA;
the database is read with sqlite3 directly.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from capture_sample import write_capture
from ingest_stub import make_records

from collector.sinks.http import HttpSink
from nettrail.cli import main
from webapp.traces.models import KIND_MODELS

REPO = Path(__file__).resolve().parent.parent
HOST = "e2e-host"
INGEST_LIMIT = 60_000
pytestmark = pytest.mark.slow


class WebappServer:
    def __init__(self, data: Path) -> None:
        self.data = data
        self.env = {
            **os.environ,
            "NETTRAIL_DATA": str(data),
            "DJANGO_SETTINGS_MODULE": "webapp.settings",
            "NETTRAIL_TRIM_INTERVAL": "0",
            # 200-record batches (about 80 KB) are over the limit: the sink must split them.
            "NETTRAIL_INGEST_MAX_BYTES": str(INGEST_LIMIT),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        self.env.pop("DATABASE_URL", None)
        self.env.pop("CHANNEL_LAYER", None)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, *args], cwd=REPO, env=self.env,
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        return done.stdout

    def token(self, host: str) -> str:
        return self.run("-m", "nettrail.cli", "token", "create", host).strip()

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "webapp.asgi:application"],
            cwd=REPO, env=self.env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                assert self.proc.poll() is None, "daphne exited during start-up"
                time.sleep(0.05)
        raise AssertionError("daphne did not start listening within 15 s")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)  # no clean shutdown: in-flight requests die
        self.proc.wait(timeout=10)
        self.proc = None

    def seqs(self, kind: str, host: str) -> list[int]:
        table = KIND_MODELS[kind]._meta.db_table
        with sqlite3.connect(self.data / "nettrail.sqlite3") as db:
            return [row[0] for row in db.execute(f"SELECT seq FROM {table} WHERE host_id = ? ORDER BY seq", (host,))]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebappServer]:
    srv = WebappServer(tmp_path_factory.mktemp("nettrail-data"))
    srv.start()
    yield srv
    if srv.proc is not None:
        srv.kill()


def test_every_record_reaches_the_database_exactly_once_across_a_server_kill(
    server: WebappServer, tmp_path: Path
) -> None:
    token = server.token(HOST)
    sink = HttpSink(
        server.url, token, tmp_path / "spool", batch_size=200, flush_interval=0.05,
        timeout=5.0, retry_interval=0.1, max_retry_interval=0.5,
    )  # fmt: skip
    total = 0
    for step in range(60):
        sink.write(make_records(total, 97, host=HOST))
        total += 97
        if step == 20:
            server.kill()
        if step == 40:
            deadline = time.monotonic() + 10
            while not sink.spooled and time.monotonic() < deadline:
                time.sleep(0.02)
            assert sink.spooled, "the sink never noticed the dead server"
            server.start()
        time.sleep(0.01)
    sink.close(timeout=30.0)
    assert not sink.spooled
    assert sink.stats.spooled_batches > 0
    assert sink.stats.rejected_batches == 0
    assert sink.stats.split_batches > 0  # the server's 413s
    assert server.seqs("tcp_state", HOST) == list(range(total))


def test_analyze_server_sends_a_capture_to_the_real_webapp(
    server: WebappServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = write_capture(tmp_path / "lab.pcap")
    token = server.token("lab.pcap")
    spool = tmp_path / "spool"
    args = ["analyze", str(capture), "--server", server.url, "--token", token, "--spool", str(spool), "--libxo", "json"]
    assert main(args) == 0
    assert "sent 2 records" in capsys.readouterr().err  # the two connection summaries (no alert fires)
    assert len(server.seqs("connection", "lab.pcap")) == 2


def test_analyze_server_reads_the_token_from_a_file_or_the_environment(
    server: WebappServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = write_capture(tmp_path / "from-file.pcap"), write_capture(tmp_path / "from-env.pcap")
    token_file = tmp_path / "token"
    token_file.write_text(server.token("from-file.pcap") + "\n")
    spool = str(tmp_path / "spool")
    common = ["--server", server.url, "--spool", spool, "--libxo", "json"]
    monkeypatch.delenv("NETTRAIL_TOKEN", raising=False)
    assert main(["analyze", str(first), *common, "--token-file", str(token_file)]) == 0
    monkeypatch.setenv("NETTRAIL_TOKEN", server.token("from-env.pcap"))
    assert main(["analyze", str(second), *common]) == 0
    assert capsys.readouterr().err.count("sent 2 records") == 2
    assert (len(server.seqs("connection", "from-file.pcap")), len(server.seqs("connection", "from-env.pcap"))) == (2, 2)
    token_file.write_text("")
    assert main(["analyze", str(first), *common, "--token-file", str(token_file)]) == 2
    assert f"--token-file {token_file}: the file is empty" in capsys.readouterr().err
