"""Benchmark: aggregate records/s through the Redis stream into PostgreSQL with 1 and 2 writer processes.

Needs PostgreSQL (DATABASE_URL or NETTRAIL_TEST_POSTGRES_URL; the run creates and
drops its own database) and redis-server (started here on a free port, AOF with
``--appendfsync``: ``always``, as docs/scale-out.md requires, or ``everysec`` to compare).
First the ingest tier's own cost of Redis per batch: the durability check and the XADD,
one batch at a time as a worker sends them (with ``always`` Redis fsyncs before it
answers). Then, for each writer count: empty tables and
stream, start the writers (``python -m webapp.bus.writer_main``) and wait until
they read, then append every batch at once (as the ingest tier does: MessagePack
records and their rows COPY-ready, webapp/bus/streams.entry_fields) and time until
the stream is empty and nothing is pending: decode, COPY, Connection updates, push, XACK. The records are bench_ingest.py's mix, spread over 4 hosts.
Keep in sync with: webapp/bus/writer.py; docs/benchmarks.md ("## Ingest bus").
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
TITLE = "## Ingest bus (Redis stream -> writers -> PostgreSQL)"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--appendfsync", choices=("always", "everysec"), default="always")
    parser.add_argument("--write-doc", action="store_true", help=f"replace the section {TITLE!r} of docs/benchmarks.md")
    args = parser.parse_args(argv)
    url = os.environ.get("DATABASE_URL") or os.environ.get("NETTRAIL_TEST_POSTGRES_URL")
    if not url or not url.startswith(("postgres://", "postgresql://")) or not shutil.which("redis-server"):
        print(
            "bench_bus: needs a postgres:// DATABASE_URL (or NETTRAIL_TEST_POSTGRES_URL) and redis-server",
            file=sys.stderr,
        )
        return 2
    work = Path(tempfile.mkdtemp(prefix="nettrail-bench-bus-"))
    port = _free_port()
    redis_proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(work), "--save", "",
         "--appendonly", "yes", "--appendfsync", args.appendfsync],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    redis_url = f"redis://127.0.0.1:{port}/0"
    os.environ.update(DATABASE_URL=url, REDIS_URL=redis_url, NETTRAIL_DATA=str(work), CHANNEL_LAYER="memory")
    os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    import django

    django.setup()
    from django.db import connection

    creation = connection.creation
    test_name = creation.create_test_db(verbosity=0, autoclobber=True, keepdb=False)
    child_env = {**os.environ, "DATABASE_URL": url.rsplit("/", 1)[0] + "/" + test_name}
    try:
        appends = append_ms(redis_url, args.records, args.batch)
        rates = {writers: run(writers, args.records, args.batch, child_env) for writers in (1, 2)}
    finally:
        connection.close()
        creation.destroy_test_db(test_name, verbosity=0)
        redis_proc.terminate()
        redis_proc.wait(timeout=20)
        shutil.rmtree(work, ignore_errors=True)
    lines = [
        f"`bench/bench_bus.py`: {args.records:,} records in batches of {args.batch:,} (4 hosts) appended at once to",
        f"the stream, timed until every entry is stored and acknowledged; Redis with AOF {args.appendfsync}, PostgreSQL",
        f"on the same machine (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs, shared: read the ratio).",
        "",
        "| writers | records/s (aggregate) |",
        "|---:|---:|",
        *(f"| {writers} | {rate:,.0f} |" for writers, rate in rates.items()),
        "",
        f"- 2 writers / 1 writer: {rates[2] / rates[1]:.2f}x (on 2 CPUs also running PostgreSQL and Redis)",
        f"- ingest tier, per batch of {args.batch:,} (durability check + XADD, one at a time): median "
        f"{statistics.median(appends):.1f} ms, max {max(appends):.1f} ms over {len(appends)} batches",
    ]
    print("\n".join(lines))
    if args.write_doc:
        from doc_section import write_section

        write_section(TITLE, lines)
    return 0


def append_ms(redis_url: str, count: int, batch: int) -> list[float]:
    """Milliseconds per batch of what an ingest worker asks of Redis (streams.append), one batch at a time."""
    import redis
    from bench_ingest import make_records

    from webapp.bus import streams

    client = redis.Redis.from_url(redis_url)
    recs = make_records(count, "bench-append")
    entries = [streams.entry_fields("bench-append", recs[i : i + batch]) for i in range(0, count, batch)]
    times = []
    for fields in entries:
        start = time.perf_counter()
        streams.durability(client)  # the check streams.append makes (it would refuse everysec)
        client.xadd(streams.STREAM, fields)
        times.append((time.perf_counter() - start) * 1000)
    client.delete(streams.STREAM)
    return times


def run(writers: int, count: int, batch: int, env: dict[str, str]) -> float:
    import redis
    from bench_ingest import make_records

    from webapp.bus import streams
    from webapp.traces.models import KIND_MODELS, Connection

    tables = [model._meta.db_table for model in [*KIND_MODELS.values(), Connection]]
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " CASCADE")
    client = redis.Redis.from_url(env["REDIS_URL"])
    client.delete(streams.STREAM)
    streams.ensure_group(client)
    hosts = [f"bench-{i}" for i in range(4)]
    per_host = count // len(hosts)
    batches = []
    for host in hosts:
        recs = make_records(per_host, host)
        batches += [(host, recs[i : i + batch]) for i in range(0, per_host, batch)]
    procs = [
        subprocess.Popen([sys.executable, "-m", "webapp.bus.writer_main", "--name", f"bench-w{i}"], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(writers)
    ]  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while len(client.xinfo_consumers(streams.STREAM, streams.GROUP)) < writers:
            assert time.monotonic() < deadline, "writers did not start"
            time.sleep(0.1)
        # The entries as the ingest tier makes them: body and COPY-ready rows (streams.entry_fields).
        entries = [streams.entry_fields(host, recs) for host, recs in batches]
        start = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        for fields in entries:
            pipe.xadd(streams.STREAM, fields)
        pipe.execute()
        while client.xlen(streams.STREAM) or client.xinfo_groups(streams.STREAM)[0]["pending"]:
            assert time.monotonic() < deadline + 600, "writers did not drain the stream"
            time.sleep(0.02)
        return per_host * len(hosts) / (time.perf_counter() - start)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
        client.delete(*[f"{streams.WRITER_KEY}bench-w{i}" for i in range(writers)])


if __name__ == "__main__":
    sys.exit(main())
