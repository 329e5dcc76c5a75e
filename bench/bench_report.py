"""Benchmark: `nettrail report` throughput (records/s) and peak RSS on a large database.

`main()` fills a temporary SQLite database with N records (default 5,000,000: 1,000
connections of SIFTR samples and state changes, inserted in batches by the ingest
path), then, in one child process, runs the peer and the report over the same rows
and prints records/s for both, their ratio and the peak RSS after each. The peer is
the bare read: the same ORM iterators turning rows into records with no rendering,
so the ratio is the cost of the xo formatting itself.
`populate()` is also used by tests/test_report_memory.py.
Keep in sync with: webapp/reports/render.py, docs/benchmarks.md ("## Reports").
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from translators.records import Record

sys.path.insert(0, str(Path(__file__).resolve().parent))
from django_pages import setup  # noqa: E402  (Django on a throw-away SQLite data directory)

BATCH = 5000


def populate(data_dir: str, records: int, connections: int = 1000) -> None:
    """Migrates a fresh database in data_dir and inserts `records` rows (+ Connection rows)."""
    setup(data_dir)
    from django.core.management import call_command
    from django.db import transaction

    from translators import records as r
    from translators.records import connection_uuid
    from webapp.traces.models import Connection, Host

    call_command("migrate", verbosity=0, interactive=False)
    Host.objects.create(name="bench")
    per_conn = max(1, records // connections)
    uuids = [connection_uuid("bench", "boot", c) for c in range(connections)]
    Connection.objects.bulk_create(
        Connection(host_id="bench", boot_id="boot", conn_uuid=u, proto="tcp", src="10.0.0.1", sport=30000 + c,
                   dst="10.0.0.2", dport=443, state="ESTABLISHED", first_seen=1000.0 + c, last_seen=1000.0 + c + per_conn)
        for c, u in enumerate(uuids)
    )  # fmt: skip
    seq = 0
    rows: list[Record] = []
    with transaction.atomic():
        for c, u in enumerate(uuids):
            for i in range(per_conn):
                seq += 1
                common = dict(host_id="bench", boot_id="boot", seq=seq, ts_ns=seq * 1000, ts_wall=1000.0 + c + i * 1e-3,
                              conn_uuid=u, src="10.0.0.1", sport=30000 + c, dst="10.0.0.2", dport=443, ip_ver=4)  # fmt: skip
                if i % 50 == 0:
                    rec: r.Record = r.TcpStateChange(**common, provider="tcp", probe="state-change",
                                                   prev_state="SYN_SENT", state="ESTABLISHED")  # fmt: skip
                else:
                    rec = r.SiftrSample(**common, provider="siftr", probe="siftr", direction="out",
                                        snd_cwnd=14480 + i, srtt=2000 + i % 100, mss=1448, conn_state=4)  # fmt: skip
                rows.append(rec)
                if len(rows) >= BATCH:
                    _flush(rows)
            if seq >= records:
                break
        _flush(rows)


def _flush(rows: list[Record]) -> None:
    """The ingest path's bulk insert (one executemany per kind), without its HTTP layer."""
    from webapp.traces.store import store_batch

    store_batch(rows)
    rows.clear()


def render(data_dir: str) -> None:
    """Child: the peer read, then the JSON report to /dev/null; one line per run:
    name, records, seconds, peak RSS KiB so far."""
    setup(data_dir)
    from analysis.export.filters import build_filter
    from webapp.reports.render import as_records, records_of, report_steps
    from webapp.traces.models import Connection
    from xo import Writer, parse_libxo

    f = build_filter(kinds="tcp_state,siftr_sample")

    def peer() -> int:
        count = 0
        for conn in Connection.objects.order_by("first_seen", "id").iterator(chunk_size=2000):
            for kind in f.connection_kinds():
                for _ in as_records(records_of(kind, f, conn_uuid=conn.conn_uuid), kind):
                    count += 1
        return count

    def report() -> int:
        with open(os.devnull, "w") as out:
            return sum(1 for _ in report_steps(Writer(out, parse_libxo("json")), f))

    for name, run in (("peer", peer), ("report", report)):
        start = time.perf_counter()
        count = run()
        seconds = time.perf_counter() - start
        print(name, count, f"{seconds:.3f}", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd")
    fill = sub.add_parser("populate")
    fill.add_argument("data_dir")
    fill.add_argument("records", type=int)
    fill.add_argument("--connections", type=int, default=1000)
    rend = sub.add_parser("render")
    rend.add_argument("data_dir")
    p.add_argument("--records", type=int, default=5_000_000)
    args = p.parse_args(argv)
    if args.cmd == "populate":
        populate(args.data_dir, args.records, args.connections)
        return 0
    if args.cmd == "render":
        render(args.data_dir)
        return 0
    with tempfile.TemporaryDirectory(prefix="nettrail-bench-") as data_dir:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, __file__, "populate", data_dir, str(args.records)], check=True)
        print(f"populated {args.records} records in {time.perf_counter() - t0:.0f} s")
        out = subprocess.run([sys.executable, __file__, "render", data_dir], capture_output=True, text=True, check=True)
        runs = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines()}
        for name in ("peer", "report"):
            n, secs, rss = int(runs[name][0]), float(runs[name][1]), int(runs[name][2])
            print(f"{name}: {n} records in {secs:.1f} s = {n / secs:,.0f} records/s, peak RSS {rss / 1024:.0f} MiB")
        print(f"ratio report/peer time: {float(runs['report'][1]) / float(runs['peer'][1]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
