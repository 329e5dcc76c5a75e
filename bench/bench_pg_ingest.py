"""Benchmark: records/s a writer process stores into PostgreSQL, against a raw COPY and the SQLite path.

Needs a PostgreSQL server: DATABASE_URL (or NETTRAIL_TEST_POSTGRES_URL) = postgres://...;
the run creates and drops its own database (Django's test database of that URL).
Same records as bench_ingest.py (realistic mix over 1,000 connections), batches of
5,000 MessagePack-encoded as they travel on the Redis stream. Measured in one run,
each phase on empty tables, best of --rounds:

* writer: what webapp/bus/writer.py does per stream entry (store_entry) -- COPY the
  entry's COPY-ready bytes into day partitions, largest kind first; meanwhile decode
  the records' views (webapp/traces/view.py: only the fields the Connection fold and
  the metric hook read; the ingest tier validated the batch) and read the batch's
  Connection rows on a second session (one json_agg; the rows the writer committed
  itself are remembered, not read), then, during the second COPY, fold them and tally
  the metric hook; after the COPYs one UPDATE ... FROM unnest to write the rows
  still at the version read (pgbulk.py), the counters, commit. The live push is not
  included (with no listener it decodes nothing).
* writer, whole records: the same entry stored as before the views -- every field
  of every record decoded, store_batch().
* staged: the same, but every batch through the redelivery path (COPY into a
  temporary table, INSERT ... SELECT ... ON CONFLICT DO NOTHING RETURNING): what an
  always-staged design would cost, and what a redelivered batch costs.
* raw COPY: the same rows, pre-built as tuples, COPYed by psycopg (write_row)
  straight into the same partitioned tables, one transaction per batch: the floor
  the issue names.
* raw COPY of the entry's bytes: the writer's COPY data sent as it is
  (copy.write), one transaction per batch: the floor of the writer's COPY alone.
* ingest tier: what an ingest worker does per batch before XADD (no HTTP, no
  Redis) -- decode + validate (host, values, connection owners), then the entry
  (body, and the COPY-ready rows); and the same without the COPY-ready rows (what
  it did before they moved there), so the cost moved from writer to ingest is shown.
* SQLite: the writer path (decode + store_batch) on SQLite WAL, in a child process.

Rounds are interleaved (a busy spell hits every phase alike); the tables report
the median of the rounds.

Target (issue 19): >= 50,000 records/s per writer process, within 1.5x of raw COPY.
Keep in sync with: webapp/traces/pgcopy.py, partitions.py; docs/benchmarks.md
("## Ingest into PostgreSQL").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
TARGET = 50_000
RATIO = 1.5
TITLE = "## Ingest into PostgreSQL (writer process)"


def _setup(database_url: str | None, data_dir: str) -> None:
    os.environ["NETTRAIL_DATA"] = data_dir
    if database_url:
        os.environ["DATABASE_URL"] = database_url
    else:
        os.environ.pop("DATABASE_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    os.environ["CHANNEL_LAYER"] = "memory"
    import django

    django.setup()


def _timed(run: Callable[[], None]) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - start, time.process_time() - cpu


def _entry_writer(entries: list[dict[Any, Any]], views: bool = True) -> Callable[[], None]:
    """webapp/bus/writer.py's Writer._handle up to the commit (no push, no XACK): store_entry.

    views=False: the whole records decoded and stored with store_batch, as before the views."""
    from translators.records import decode_batch
    from webapp.bus.writer import store_entry
    from webapp.traces import pgcopy
    from webapp.traces.store import store_batch

    as_read = [{key.encode(): value for key, value in fields.items()} for fields in entries]  # Redis gives bytes

    def run() -> None:
        for fields in as_read:
            if views:
                result, records = store_entry(fields)
                assert records is None, "stored from the whole records, not the views"
            else:
                result = store_batch(
                    decode_batch(fields[b"body"], "msgpack", trusted=True), pgcopy.decode(fields[b"copy"])
                )
            assert result.duplicates == 0, result.duplicates

    return run


def _ingest_tier(bodies: list[bytes], with_copy: bool) -> Callable[[], None]:
    """webapp/traces/ingest.py's checks of a batch and webapp/bus/streams.py's entry (no HTTP, no Redis)."""
    from translators.records import decode_batch
    from webapp.bus import streams
    from webapp.traces import owner
    from webapp.traces.ingest import _foreign_record
    from webapp.traces.values import first_bad_value

    def run() -> None:
        for body in bodies:
            records = decode_batch(body, "msgpack")
            assert _foreign_record(records, "bench") is None
            assert first_bad_value(records) is None
            assert owner.foreign_connection(records, "bench") is None
            fields = streams.entry_fields("bench", records, copy_ready=with_copy)
            assert ("copy" in fields) == with_copy

    return run


def _writer(bodies: list[bytes]) -> Callable[[], None]:
    from translators.records import decode_batch
    from webapp.traces.store import store_batch

    def run() -> None:
        for body in bodies:
            result = store_batch(decode_batch(body, "msgpack"))
            assert result.duplicates == 0, result.duplicates

    return run


def _raw_copy(row_batches: list[list[tuple[str, Any]]]) -> Callable[[], None]:
    from django.db import connection, transaction

    from webapp.traces import pgcopy

    def run() -> None:
        for batch in row_batches:
            with transaction.atomic(), connection.cursor() as cursor:
                for kind, rows in batch:
                    # The day partitions exist: the writer phase, run first, made them.
                    with cursor.cursor.copy(pgcopy._plan(kind).copy_sql) as copy:
                        if isinstance(rows, bytes):
                            copy.write(rows)
                            continue
                        for row in rows:
                            copy.write_row(row)

    return run


def _empty_tables() -> None:
    from django.db import connection

    from webapp.traces import lifecycle
    from webapp.traces.models import KIND_MODELS, Connection

    tables = [model._meta.db_table for model in [*KIND_MODELS.values(), Connection]]
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " CASCADE")
    # A round starts as a new writer would: remembering no Connection rows (the ones it
    # remembers are gone; it would find out, read them again and fold again: not a
    # writer's common batch).
    lifecycle.forget_rows()


def _prepare(count: int, batch: int) -> tuple[list[bytes], list[list[tuple[str, Any]]]]:
    import msgspec
    from bench_ingest import make_records

    from webapp.traces.store import _table

    records = make_records(count, "bench")
    record_batches = [records[i : i + batch] for i in range(0, count, batch)]
    bodies = [msgspec.msgpack.encode(b) for b in record_batches]
    row_batches: list[list[tuple[str, Any]]] = []
    for group in record_batches:
        per_kind: dict[str, list[tuple[Any, ...]]] = {}
        for rec in group:
            per_kind.setdefault(rec.kind, []).append(_table(rec.kind).row(rec))
        row_batches.append(list(per_kind.items()))
    return bodies, row_batches


def _median(runs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)


def _connection_updates() -> tuple[int, int]:
    """(updates, HOT updates) of the Connection table so far, as PostgreSQL's statistics count them."""
    from django.db import connection

    from webapp.traces.models import Connection

    time.sleep(1.2)  # a backend's counts reach the statistics within a second of its going idle
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = %s::regclass",
            [Connection._meta.db_table],
        )
        row = cursor.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def run_postgres(
    url: str, count: int, batch: int, rounds: int
) -> tuple[dict[str, tuple[float, float]], str, tuple[int, int]]:
    """Medians per phase, the server's version, and the writer phases' (Connection updates, HOT ones)."""
    data_dir = tempfile.mkdtemp(prefix="nettrail-bench-pg-")
    _setup(url, data_dir)
    from django.db import connection

    from translators.records import decode_batch
    from webapp.bus import streams
    from webapp.serve import tune_gc
    from webapp.traces import pgcopy

    creation = connection.creation
    test_name = creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        bodies, row_batches = _prepare(count, batch)
        entries = [streams.entry_fields("bench", decode_batch(body, "msgpack")) for body in bodies]
        copy_batches: list[list[tuple[str, Any]]] = [
            [(kind, data) for kind, _, data in pgcopy.decode(cast(bytes, fields["copy"]))] for fields in entries
        ]
        tune_gc()
        runs: dict[str, list[tuple[float, float]]] = {}

        whole = _entry_writer(entries, views=False)  # the staged path starts from the whole records

        def staged() -> None:
            pgcopy.DIRECT_FIRST = False
            try:
                whole()
            finally:
                pgcopy.DIRECT_FIRST = True

        phases = {
            "writer": _entry_writer(entries),
            "writer_whole": whole,
            "staged": staged,
            "raw": _raw_copy(row_batches),
            "raw_bytes": _raw_copy(copy_batches),
            "ingest": _ingest_tier(bodies, with_copy=True),
            "ingest_plain": _ingest_tier(bodies, with_copy=False),
        }
        _entry_writer(entries[:1])()  # warm-up: partitions, plans, first queries
        updates = [0, 0]
        for _ in range(rounds):
            for name, phase in phases.items():  # interleaved: a busy spell hits every phase alike
                _empty_tables()
                before = _connection_updates() if name == "writer" else (0, 0)
                runs.setdefault(name, []).append(_timed(phase))
                if name == "writer":
                    after = _connection_updates()
                    updates = [updates[0] + after[0] - before[0], updates[1] + after[1] - before[1]]
        _empty_tables()
        medians = {name: _median(timings) for name, timings in runs.items()}
        version = f"{connection.pg_version // 10000}.{connection.pg_version % 10000}"
        return medians, version, (updates[0], updates[1])
    finally:
        from webapp.traces import pgbulk

        pgbulk.close_side()
        connection.close()
        creation.destroy_test_db(test_name, verbosity=0)
        shutil.rmtree(data_dir, ignore_errors=True)


def run_sqlite(count: int, batch: int, rounds: int) -> tuple[float, float]:
    data_dir = tempfile.mkdtemp(prefix="nettrail-bench-pg-sqlite-")
    try:
        _setup(None, data_dir)
        from django.core.management import call_command

        from webapp.serve import tune_gc

        call_command("migrate", verbosity=0, interactive=False)
        bodies, _ = _prepare(count, batch)
        tune_gc()
        runs = []
        for _ in range(rounds):
            _empty_sqlite()
            runs.append(_timed(_writer(bodies)))
        return _median(runs)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _empty_sqlite() -> None:
    from webapp.traces.models import KIND_MODELS, Connection

    for model in [*KIND_MODELS.values(), Connection]:
        model.objects.all().delete()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-doc", action="store_true", help=f"replace the section {TITLE!r} of docs/benchmarks.md")
    parser.add_argument("--sqlite-peer", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.sqlite_peer:
        wall, cpu = run_sqlite(args.records, args.batch, args.rounds)
        print(json.dumps({"wall": wall, "cpu": cpu}))
        return 0
    url = os.environ.get("DATABASE_URL") or os.environ.get("NETTRAIL_TEST_POSTGRES_URL")
    if not url or not url.startswith(("postgres://", "postgresql://")):
        print("bench_pg_ingest: set DATABASE_URL or NETTRAIL_TEST_POSTGRES_URL to a postgres:// URL", file=sys.stderr)
        return 2
    peer = [sys.executable, __file__, "--sqlite-peer", *map(str, ("--records", args.records, "--batch", args.batch))]
    peer += ["--rounds", str(args.rounds)]
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    sqlite = json.loads(subprocess.run(peer, env=env, cwd=ROOT, check=True, capture_output=True, text=True).stdout)
    medians, version, updates = run_postgres(url, args.records, args.batch, args.rounds)
    medians["sqlite"] = (sqlite["wall"], sqlite["cpu"])
    lines = report(medians, args.records, args.batch, args.rounds, version, updates)
    print("\n".join(lines))
    if args.write_doc:
        from doc_section import write_section

        write_section(TITLE, lines)
    return 0


def report(
    runs: dict[str, tuple[float, float]], count: int, batch: int, rounds: int, version: str, updates: tuple[int, int]
) -> list[str]:
    rate = {name: count / wall for name, (wall, _) in runs.items()}
    cpu_rate = {name: count / cpu for name, (_, cpu) in runs.items()}
    labels = {
        "writer": "writer: store_entry: the records' views decoded, the entry's COPY-ready rows COPYed, connections folded and written, hooks",
        "writer_whole": "same, the whole records decoded (store_batch: what the writer did before the views)",
        "staged": "same, every batch staged (temp table + INSERT ... ON CONFLICT DO NOTHING; rows built from the records)",
        "raw": "raw psycopg COPY of the same pre-built row tuples (write_row) into the same tables",
        "raw_bytes": "raw psycopg COPY of the entry's COPY bytes (copy.write) into the same tables",
        "ingest": "ingest tier: decode + validate + entry with the COPY-ready rows (no HTTP, no Redis)",
        "ingest_plain": "ingest tier as before: decode + validate + entry without them",
        "sqlite": "writer path on SQLite WAL (child process, same records)",
    }
    ratio = rate["raw"] / rate["writer"]
    cpu_ratio = cpu_rate["raw"] / cpu_rate["writer"]
    moved = 1 / cpu_rate["ingest"] - 1 / cpu_rate["ingest_plain"]  # CPU-seconds per record the ingest tier took on
    lines = [
        f"`bench/bench_pg_ingest.py`: {count:,} records in batches of {batch:,}, median of {rounds} interleaved rounds,",
        f"one process, PostgreSQL {version} on this machine (load average {os.getloadavg()[0]:.1f}"
        f" on {os.cpu_count()} CPUs, shared with other work: read the ratios and the per-CPU-second figures).",
        "",
        "| path | records/s | records per CPU-second of the process (PostgreSQL's own CPU not counted) |",
        "|---|---:|---:|",
    ]
    lines += [f"| {labels[name]} | {rate[name]:,.0f} | {cpu_rate[name]:,.0f} |" for name in labels]
    lines += [
        "",
        f"- raw COPY / writer: {ratio:.2f}x in records/s, {cpu_ratio:.2f}x in records per CPU-second"
        f" (target <= {RATIO}x: {'met' if ratio <= RATIO else 'NOT met'} in records/s,"
        f" {'met' if cpu_ratio <= RATIO else 'NOT met'} per CPU-second)",
        f"- raw COPY of the entry's bytes / writer: {rate['raw_bytes'] / rate['writer']:.2f}x in records/s,"
        f" {cpu_rate['raw_bytes'] / cpu_rate['writer']:.2f}x per CPU-second",
        f"- cost moved to the ingest tier (COPY-ready rows): {moved * 1e6:.1f} CPU-µs per record;"
        f" ingest tier {cpu_rate['ingest_plain']:,.0f} -> {cpu_rate['ingest']:,.0f} records per CPU-second",
        f"- writer from the views / from the whole records: {cpu_rate['writer'] / cpu_rate['writer_whole']:.2f}x"
        f" per CPU-second, {rate['writer'] / rate['writer_whole']:.2f}x in records/s",
        f"- staged writer / direct writer: {rate['staged'] / rate['writer']:.2f} (records/s)",
        f"- PostgreSQL writer / SQLite writer: {rate['writer'] / rate['sqlite']:.2f}",
        f"- the writer's Connection updates (all rounds): {updates[0]:,}, HOT (no index entry): {updates[1]:,}"
        f" ({updates[1] / max(updates[0], 1):.0%})",
        f"- target >= {TARGET:,} records/s per writer: {'met' if rate['writer'] >= TARGET else 'NOT met'} in records/s"
        f" ({rate['writer']:,.0f}), {'met' if cpu_rate['writer'] >= TARGET else 'NOT met'}"
        f" per CPU-second of the writer ({cpu_rate['writer']:,.0f})",
        "",
        "The writer neither builds nor formats rows (the ingest tier queues them COPY-ready: compare the two",
        "ingest-tier rows) nor decodes what it does not read: an all-new batch is stored from its records' views",
        "(webapp/traces/view.py), whose decoding skips every field the Connection fold and the metric hook do not",
        "read. Its own work overlaps the server's: while PostgreSQL stores the largest COPY, the views are",
        "decoded and the batch's Connection rows read on a second session (those the writer committed itself are",
        "remembered: after a round's first batch nothing is read); during the second COPY they are folded and the",
        "metric hook tallies; after the COPYs, one UPDATE ... FROM unnest writes the rows still at the version read",
        "(webapp/traces/pgbulk.py, lifecycle.py). A batch holding an already stored record, or a value the database",
        "refuses, is stored from its whole records as before (the 'whole records' row is that cost for every batch).",
        "What is left of the writer's own CPU beyond the raw COPY's is the Connection fold in Python and the",
        "views' decoding. The batch updates 1,000 Connection rows; on PostgreSQL the table's indexes name",
        "last_seen_bucket (last_seen // 10 s) where they would name last_seen, and its fillfactor leaves room on",
        "each page, so an update whose connection stays in its bucket is HOT: no entry in any of its 14 indexes",
        "(webapp/traces/recency.py; this benchmark's records span a second or two of wall clock; a live connection",
        "changes bucket, and pays one non-HOT update, every 10 s of activity). Ingest workers are stateless and scale out;",
        "a host's batches are stored one at a time (docs/scale-out.md), so the writer is the stage worth making cheap.",
    ]
    return lines


if __name__ == "__main__":
    sys.exit(main())
