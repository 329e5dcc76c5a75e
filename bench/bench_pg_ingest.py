"""Benchmark: records/s a writer process stores into PostgreSQL, against a raw COPY and the SQLite path.

Needs a PostgreSQL server: DATABASE_URL (or NETTRAIL_TEST_POSTGRES_URL) = postgres://...;
the run creates and drops its own database (Django's test database of that URL).
Same records as bench_ingest.py (realistic mix over 1,000 connections), batches of
5,000 MessagePack-encoded as they travel on the Redis stream. Measured in one run,
each phase on empty tables, best of --rounds:

* writer: what webapp/bus/writer.py does per batch -- decode + validate the
  MessagePack, store_batch() (COPY into day partitions, Connection updates, metric
  hooks), commit.
* staged: the same, but every batch through the redelivery path (COPY into a
  temporary table, INSERT ... SELECT ... ON CONFLICT DO NOTHING RETURNING): what an
  always-staged design would cost, and what a redelivered batch costs.
* raw COPY: the same rows, pre-built as tuples, COPYed by psycopg straight into the
  same partitioned tables, one transaction per batch: the floor.
* SQLite: the writer path (decode + store_batch) on SQLite WAL, in a child process.

Target (issue 19): >= 50,000 records/s per writer process, within 1.5x of raw COPY.
Keep in sync with: webapp/traces/pgcopy.py, partitions.py; docs/benchmarks.md
("## Ingest into PostgreSQL").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


def _writer(bodies: list[bytes]) -> Callable[[], None]:
    from translators.records import decode_batch
    from webapp.traces.store import store_batch

    def run() -> None:
        for body in bodies:
            result = store_batch(decode_batch(body, "msgpack"))
            assert result.duplicates == 0, result.duplicates

    return run


def _raw_copy(row_batches: list[list[tuple[str, list[tuple[Any, ...]]]]]) -> Callable[[], None]:
    from django.db import connection, transaction

    from webapp.traces import pgcopy

    def run() -> None:
        for batch in row_batches:
            with transaction.atomic(), connection.cursor() as cursor:
                for kind, rows in batch:
                    # The day partitions exist: the writer phase, run first, made them.
                    with cursor.cursor.copy(pgcopy._plan(kind).copy_sql) as copy:
                        for row in rows:
                            copy.write_row(row)

    return run


def _empty_tables() -> None:
    from django.db import connection

    from webapp.traces.models import KIND_MODELS, Connection

    tables = [model._meta.db_table for model in [*KIND_MODELS.values(), Connection]]
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " CASCADE")


def _prepare(count: int, batch: int) -> tuple[list[bytes], list[list[tuple[str, list[tuple[Any, ...]]]]]]:
    import msgspec
    from bench_ingest import make_records

    from webapp.traces.store import _table

    records = make_records(count, "bench")
    record_batches = [records[i : i + batch] for i in range(0, count, batch)]
    bodies = [msgspec.msgpack.encode(b) for b in record_batches]
    row_batches = []
    for group in record_batches:
        per_kind: dict[str, list[tuple[Any, ...]]] = {}
        for rec in group:
            per_kind.setdefault(rec.kind, []).append(_table(rec.kind).row(rec))
        row_batches.append(list(per_kind.items()))
    return bodies, row_batches


def run_postgres(url: str, count: int, batch: int, rounds: int) -> tuple[dict[str, tuple[float, float]], str]:
    data_dir = tempfile.mkdtemp(prefix="nettrail-bench-pg-")
    _setup(url, data_dir)
    from django.db import connection

    from webapp.serve import tune_gc
    from webapp.traces import pgcopy

    creation = connection.creation
    test_name = creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    try:
        bodies, row_batches = _prepare(count, batch)
        tune_gc()
        best: dict[str, tuple[float, float]] = {}

        def staged() -> None:
            pgcopy.DIRECT_FIRST = False
            try:
                _writer(bodies)()
            finally:
                pgcopy.DIRECT_FIRST = True

        phases = {"writer": _writer(bodies), "staged": staged, "raw": _raw_copy(row_batches)}
        for _ in range(rounds):
            for name, phase in phases.items():  # interleaved: a busy spell hits every phase alike
                _empty_tables()
                wall, cpu = _timed(phase)
                if name not in best or wall < best[name][0]:
                    best[name] = (wall, cpu)
        _empty_tables()
        return best, f"{connection.pg_version // 10000}.{connection.pg_version % 10000}"
    finally:
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
        best: tuple[float, float] | None = None
        for _ in range(rounds):
            _empty_sqlite()
            result = _timed(_writer(bodies))
            best = result if best is None or result[0] < best[0] else best
        assert best is not None
        return best
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
    parser.add_argument("--rounds", type=int, default=2)
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
    best, version = run_postgres(url, args.records, args.batch, args.rounds)
    best["sqlite"] = (sqlite["wall"], sqlite["cpu"])
    lines = report(best, args.records, args.batch, args.rounds, version)
    print("\n".join(lines))
    if args.write_doc:
        from doc_section import write_section

        write_section(TITLE, lines)
    return 0


def report(best: dict[str, tuple[float, float]], count: int, batch: int, rounds: int, version: str) -> list[str]:
    rate = {name: count / wall for name, (wall, _) in best.items()}
    cpu_rate = {name: count / cpu for name, (_, cpu) in best.items()}
    labels = {
        "writer": "writer: decode + store_batch (COPY into day partitions, connections, hooks)",
        "staged": "same, every batch staged (temp table + INSERT ... ON CONFLICT DO NOTHING)",
        "raw": "raw psycopg COPY of the same pre-built rows into the same tables",
        "sqlite": "writer path on SQLite WAL (child process, same records)",
    }
    ratio = rate["raw"] / rate["writer"]
    lines = [
        f"`bench/bench_pg_ingest.py`: {count:,} records in batches of {batch:,}, best of {rounds} interleaved rounds,",
        f"one process, PostgreSQL {version} on this machine (load average {os.getloadavg()[0]:.1f}"
        f" on {os.cpu_count()} CPUs, shared with other work: read the ratios).",
        "",
        "| path | records/s | records per CPU-second of the writer process (PostgreSQL's own CPU not counted) |",
        "|---|---:|---:|",
    ]
    lines += [f"| {labels[name]} | {rate[name]:,.0f} | {cpu_rate[name]:,.0f} |" for name in labels]
    lines += [
        "",
        f"- raw COPY / writer: {ratio:.2f}x (target <= {RATIO}x: {'met' if ratio <= RATIO else 'NOT met'})",
        f"- staged writer / direct writer: {rate['staged'] / rate['writer']:.2f} (records/s; staging writes every row twice)",
        f"- PostgreSQL writer / SQLite writer: {rate['writer'] / rate['sqlite']:.2f}",
        f"- target >= {TARGET:,} records/s per writer: {'met' if rate['writer'] >= TARGET else 'NOT met'}",
    ]
    return lines


if __name__ == "__main__":
    sys.exit(main())
