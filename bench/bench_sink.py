"""Benchmark: the HTTP sink's throughput, live and through the spool, against plain POSTs.

A local ingest stub (tests/ingest_stub.py: http.server in a thread, decoding every
batch like the webapp) receives N records (default 200,000) in batches of 1,000:
1. through HttpSink with the server up (write() then close()), and again with its ledger
   of what it holds in memory (collector/sinks/held.py) writing nothing: what the ledger
   costs (rounds of both alternate, the median of each);
2. peer: the same batches, pre-encoded, POSTed one after another with requests;
3. through HttpSink with the server down: every batch fsync'd into the spool;
4. peer: the same bytes appended to a file without fsync;
5. the spool replayed by a new HttpSink once the server is back.
Ratios are against the peers measured in the same run.
Keep in sync with: collector/sinks/http.py, collector/spool.py, docs/benchmarks.md ("## HTTP sink").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BATCH = 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_sink")
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5, help="live runs with and without the ledger's writes")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    import msgspec
    import requests
    from ingest_stub import TOKEN, IngestStub, make_records

    from collector.sinks import held
    from collector.sinks.http import HttpSink

    n = args.records
    records = make_records(0, n)
    batches = [msgspec.msgpack.encode(records[i : i + BATCH]) for i in range(0, n, BATCH)]
    stub = IngestStub()
    stub.start()
    with tempfile.TemporaryDirectory(prefix="nettrail-bench-sink-") as tmp:

        def through_sink(directory: Path) -> float:
            stub.received.clear()
            t0 = time.perf_counter()
            sink = HttpSink(stub.url, TOKEN, directory, batch_size=BATCH, flush_interval=0.05)
            for i in range(0, n, BATCH):
                sink.write(records[i : i + BATCH])
            sink.close()
            assert len(stub.received) == n
            return time.perf_counter() - t0

        writes = (held.HeldLedger.note, held.HeldLedger.hold)
        with_ledger, without = [], []
        for r in range(args.rounds):
            with_ledger.append(through_sink(Path(tmp) / f"live{r}"))
            held.HeldLedger.note = held.HeldLedger.hold = lambda *a: None  # type: ignore[method-assign,assignment]
            try:
                without.append(through_sink(Path(tmp) / f"bare{r}"))
            finally:
                held.HeldLedger.note, held.HeldLedger.hold = writes  # type: ignore[method-assign]
        live, bare = statistics.median(with_ledger), statistics.median(without)

        session = requests.Session()
        t0 = time.perf_counter()
        for body in batches:
            answer = session.post(
                stub.url + "/api/ingest",
                data=body,
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/msgpack"},
            )
            assert answer.status_code == 200
        peer = time.perf_counter() - t0

        stub.stop()
        t0 = time.perf_counter()
        down = HttpSink(stub.url, TOKEN, Path(tmp) / "spool", batch_size=BATCH, flush_interval=0.05, retry_interval=60)
        for i in range(0, n, BATCH):
            down.write(records[i : i + BATCH])
        down.close(timeout=0)
        spooled = time.perf_counter() - t0
        t0 = time.perf_counter()
        with open(Path(tmp) / "plain", "ab") as f:
            for body in batches:
                f.write(body)
                f.flush()
        plain = time.perf_counter() - t0

        stub.received.clear()
        stub.start()
        t0 = time.perf_counter()
        HttpSink(stub.url, TOKEN, Path(tmp) / "spool", batch_size=BATCH).close(timeout=120)
        replay = time.perf_counter() - t0
        assert len(stub.received) == n, len(stub.received)
        stub.stop()

    print(f"HTTP sink: {n:,} records in batches of {BATCH:,} to a local ingest stub")
    print(f"  live through HttpSink        {n / live:12,.0f} records/s   (median of {args.rounds})")
    print(f"  ... its ledger writing nothing {n / bare:10,.0f} records/s   (with the ledger {bare / live:.3f}x)")
    print(f"  plain POSTs (peer)           {n / peer:12,.0f} records/s   (sink {peer / live:.2f}x the peer)")
    print(f"  server down: spooled, fsync  {n / spooled:12,.0f} records/s")
    print(f"  appended, no fsync (peer)    {n / plain:12,.0f} records/s   (spool {plain / spooled:.2f}x the peer)")
    print(f"  spool replayed on restart    {n / replay:12,.0f} records/s   ({peer / replay:.2f}x the plain POSTs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
