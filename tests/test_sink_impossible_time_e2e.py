"""A record with an impossible time, sent by the collector's HTTP sink to the real webapp
(daphne, SQLite): the webapp refuses the batch naming that record (issue 33 item 6), the
sink keeps it in its spool's rejected/ with the server's reason and sends the others
again, which are stored; the refused record is counted in the sink's loss report.
Nothing is lost unseen. tests/test_ingest_impossible_times.py has the 400 itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from daphne_server import Server, running_webapp
from ingest_stub import make_records
from test_sink_spool_e2e import Numbering, seqs

from analysis.alerts.live import Extras
from collector.sinks.http import HttpSink
from translators.kernel import KernelEnv

HOST = "time-host"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_webapp(prefix="nettrail-times-", host=HOST) as srv:
        yield srv


@pytest.mark.parametrize(
    ("field", "value", "why"), [("ts_wall", 1e300, "a day ahead"), ("ts_ns", -(2**62), "negative")]
)
def test_an_impossible_time_costs_its_record_which_the_sink_keeps_and_counts(
    server: Server, tmp_path: Path, field: str, value: float, why: str
) -> None:
    first = 700_000 if field == "ts_wall" else 800_000  # seqs of their own per case
    sink = HttpSink(server.url, server.token, tmp_path / "spool", batch_size=50, flush_interval=0.02)
    extras = Extras(Numbering(), KernelEnv(host_id=HOST, boot_id=field[:2] * 8, wall_offset=0.0), sink, None)
    records = make_records(first, 10, host=HOST)
    setattr(records[4], field, value)
    try:
        sink.write(records)
        assert sink.flush(timeout=30)
        reports = extras.add([])
        assert [(r.kind, r.event_type, r.lost, r.hook) for r in reports] == [
            ("loss_report", "rejected", 1, "sink/rejected")
        ]
    finally:
        sink.close(timeout=30)
    stored = [s for s in seqs(server, "tcp_state", HOST) if first <= s < first + 10]
    assert stored == [first + i for i in range(10) if i != 4]
    [kept] = (tmp_path / "spool" / "rejected").glob("*.error")
    assert f"record 4: {field}: " in kept.read_text() and why in kept.read_text()
