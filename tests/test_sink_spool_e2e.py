"""The HTTP sink against the real webapp (daphne, SQLite): kill the server mid-stream, keep
writing, restart it -- every record is stored exactly once. Also `analyze --server`.

The server is the real webapp (tests/daphne_server.py) on a free port with its own
NETTRAIL_DATA; the database is read with sqlite3 directly.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from capture_sample import write_capture
from daphne_server import Server, running_webapp
from ingest_stub import make_records

from analysis.alerts.live import Extras
from collector.sinks.http import HttpSink
from nettrail.cli import main
from translators.kernel import KernelEnv
from webapp.traces.models import KIND_MODELS

REPO = Path(__file__).resolve().parent.parent
HOST = "e2e-host"
INGEST_LIMIT = 60_000
pytestmark = pytest.mark.slow


def seqs(server: Server, kind: str, host: str) -> list[int]:
    table = KIND_MODELS[kind]._meta.db_table
    # Read-only: root must not leave a -shm or -wal file the server's user cannot open.
    with sqlite3.connect(f"file:{server.data_dir / 'nettrail.sqlite3'}?mode=ro", uri=True) as db:
        return [row[0] for row in db.execute(f"SELECT seq FROM {table} WHERE host_id = ? ORDER BY seq", (host,))]


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    # 200-record batches (about 80 KB) are over the limit: the sink must split them.
    with running_webapp({"NETTRAIL_INGEST_MAX_BYTES": str(INGEST_LIMIT)}, prefix="nettrail-spool-", host=HOST) as srv:
        yield srv


def test_every_record_reaches_the_database_exactly_once_across_a_server_kill(server: Server, tmp_path: Path) -> None:
    token = server.token
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
    assert seqs(server, "tcp_state", HOST) == list(range(total))


def test_analyze_server_sends_a_capture_to_the_real_webapp(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = write_capture(tmp_path / "lab.pcap")
    token = server.make_token("lab.pcap")
    spool = tmp_path / "spool"
    args = ["analyze", str(capture), "--server", server.url, "--token", token, "--spool", str(spool), "--libxo", "json"]
    assert main(args) == 0
    assert "sent 3 records" in capsys.readouterr().err  # the two connection summaries, P7 of the refused one
    assert len(seqs(server, "connection", "lab.pcap")) == 2


def test_analyze_server_reads_the_token_from_a_file_or_the_environment(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = write_capture(tmp_path / "from-file.pcap"), write_capture(tmp_path / "from-env.pcap")
    token_file = tmp_path / "token"
    token_file.write_text(server.make_token("from-file.pcap") + "\n")
    spool = str(tmp_path / "spool")
    common = ["--server", server.url, "--spool", spool, "--libxo", "json"]
    monkeypatch.delenv("NETTRAIL_TOKEN", raising=False)
    assert main(["analyze", str(first), *common, "--token-file", str(token_file)]) == 0
    monkeypatch.setenv("NETTRAIL_TOKEN", server.make_token("from-env.pcap"))
    assert main(["analyze", str(second), *common]) == 0
    assert capsys.readouterr().err.count("sent 3 records") == 2
    assert (len(seqs(server, "connection", "from-file.pcap")), len(seqs(server, "connection", "from-env.pcap"))) == (
        2,
        2,
    )
    token_file.write_text("")
    assert main(["analyze", str(first), *common, "--token-file", str(token_file)]) == 2
    assert f"--token-file {token_file}: the file is empty" in capsys.readouterr().err


class Numbering:
    """The collector's record numbering (the source's seq), for the sink's own loss records."""

    seq = 1_000_000

    def number(self, records: list[Any]) -> list[Any]:
        for record in records:
            record.seq, self.seq = self.seq, self.seq + 1
        return records


def test_a_batch_the_server_refuses_becomes_a_rejected_loss_report_on_the_status_page(
    server: Server, tmp_path: Path
) -> None:
    """Records that never reach the database because the server refused them (here: another
    host's records, 403) are counted in a loss report that does reach it."""
    sink = HttpSink(server.url, server.token, tmp_path / "spool", batch_size=50, flush_interval=0.02)
    extras = Extras(Numbering(), KernelEnv(host_id=HOST, boot_id="r" * 16, wall_offset=0.0), sink, None)
    try:
        sink.write(make_records(0, 7, host="another-host"))
        assert sink.flush(timeout=30)
        reports = extras.add([])
        assert [(r.kind, r.event_type, r.lost, r.lost_total, r.hook) for r in reports] == [
            ("loss_report", "rejected", 7, 7, "sink/rejected")
        ]
        assert extras.add([]) == []  # told once
        sink.write(reports)
        assert sink.flush(timeout=30)
    finally:
        sink.close(timeout=30)
    assert (sink.stats.rejected_records, sink.stats.sent_records) == (7, 1)
    status = server.login().get(f"{server.url}/api/dash/status", params={"host": HOST}, timeout=30).json()
    assert status["hosts"][0]["losses"] == [{"event_type": "rejected", "lost": 7}]


def test_a_value_the_database_refuses_costs_its_record_not_its_batch(server: Server, tmp_path: Path) -> None:
    """A NUL in one record's text (a kernel string read past its end once did this): the
    webapp refuses the batch naming that record; the sink keeps it in rejected/ and sends the
    other nine again, which are stored; the one refused record is the loss report's count."""
    sink = HttpSink(server.url, server.token, tmp_path / "spool", batch_size=50, flush_interval=0.02)
    extras = Extras(Numbering(), KernelEnv(host_id=HOST, boot_id="n" * 16, wall_offset=0.0), sink, None)
    records = make_records(900_000, 10, host=HOST)  # seqs no other test here stores
    records[4].comm = "cu\0bic"
    try:
        sink.write(records)
        assert sink.flush(timeout=30)
        reports = extras.add([])
        assert [(r.kind, r.event_type, r.lost, r.hook) for r in reports] == [
            ("loss_report", "rejected", 1, "sink/rejected")
        ]
    finally:
        sink.close(timeout=30)
    stored = [s for s in seqs(server, "tcp_state", HOST) if 900_000 <= s < 900_010]
    assert stored == [900_000 + i for i in range(10) if i != 4]
    [kept] = (tmp_path / "spool" / "rejected").glob("*.error")
    assert "record 4: comm" in kept.read_text() and "NUL" in kept.read_text()
