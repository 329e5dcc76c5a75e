"""Benchmark: the connections table's pages with 100,000 connections stored (SQLite).

`main()` fills a temporary database with N Connection rows (default 100,000), then times
whole requests to /api/dash/connections (filter, count, page, JSON) through Django's test
client: the first page (latest activity first), a page half-way down reached by its keyset cursor, a filtered
page and a page sorted by a computed column. The peer, measured in the same run on the
same rows, is OFFSET pagination of the same half-way page (what the dashboard avoids):
the ratio (rows only, both ways) shows what keyset paging saves deep in the table.
Keep in sync with: webapp/dashboard/queries.py, docs/benchmarks.md ("## Dashboard").
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BATCH = 5000
REPEAT = 7


def setup(data_dir: str) -> None:
    os.environ["NETTRAIL_DATA"] = data_dir
    os.environ.pop("DATABASE_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def populate(count: int) -> None:
    from django.core.management import call_command

    from translators.records import connection_uuid
    from webapp.traces.models import Connection

    call_command("migrate", verbosity=0, interactive=False)
    comms = ("nginx", "postgres", "sshd", "curl", "python3", "redis-server", "node")
    rows = []
    for i in range(count):
        rows.append(
            Connection(
                host_id=f"host{i % 4}", boot_id="boot", conn_uuid=connection_uuid("bench", "boot", i), proto="tcp",
                src="10.0.0.1", sport=(443, 5432, 22, 40000 + i % 20000)[i % 4], dst=f"10.0.{i % 250}.{i % 200}",
                dport=30000 + i % 30000, state=("ESTABLISHED", "CLOSED", "TIME_WAIT")[i % 3], closed=i % 3 == 1,
                first_seen=1_700_000_000.0 + i * 0.01, last_seen=1_700_000_000.0 + i * 0.01 + (i % 97),
                bytes_orig=(i * 7919) % 10_000_000, bytes_resp=(i * 104729) % 1_000_000, retransmits=i % 11 // 9,
                pid=1000 + i % 500, tgid=1000 + i % 500, comm=comms[i % len(comms)], uid=i % 3 * 1000,
            )
        )  # fmt: skip
        if len(rows) >= BATCH:
            Connection.objects.bulk_create(rows)
            rows.clear()
    Connection.objects.bulk_create(rows)


def timed(fn: Callable[[], Any]) -> float:
    """Median milliseconds of REPEAT calls (after one warm-up)."""
    fn()
    samples = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_dashboard_pages")
    parser.add_argument("--connections", type=int, default=100_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nettrail-bench-") as data_dir:
        setup(data_dir)
        from django.contrib.auth import get_user_model
        from django.test import Client

        from webapp.dashboard import queries

        t0 = time.perf_counter()
        populate(args.connections)
        print(f"dashboard pages: {args.connections:,} connections stored in {time.perf_counter() - t0:.1f} s")
        client = Client(HTTP_HOST="127.0.0.1")
        client.force_login(get_user_model().objects.create_user("bench", password="bench-only"))
        half = args.connections // 2
        qs = queries.annotated()
        mid = qs.annotate(sort_key=queries.SORTS["last"].expr).order_by("-sort_key", "-id")[half - 1]
        cursor = queries.encode_cursor(mid.sort_key, mid.pk)

        def get(**params: Any) -> Callable[[], Any]:
            def call() -> None:
                resp = client.get("/api/dash/connections", {"limit": 50, **params})
                assert resp.status_code == 200, resp.content
                assert len(resp.json()["rows"]) == 50

            return call

        def keyset_page() -> None:  # rows only, the same way as the peer below
            assert len(queries.page(qs, "-last", cursor, 50).rows) == 50

        def offset_page() -> None:  # the peer: the same half-way page by OFFSET
            rows = list(qs.order_by("-last_seen", "-id")[half : half + 50])
            assert len(rows) == 50

        first = timed(get())
        deep = timed(get(cursor=cursor))
        offset = timed(offset_page)
        keyset = timed(keyset_page)
        filtered = timed(get(q="port 443 and comm nginx and retrans > 0"))
        by_bytes = timed(get(sort="-bytes"))
        by_start = timed(get(sort="-start"))
        print(f"  first page (latest activity first)    {first:8.1f} ms per request")
        print(
            f"  page {half // 50:,} by keyset cursor          {deep:8.1f} ms per request  ({deep / first:.2f}x the first page)"
        )
        print(
            f"  page {half // 50:,} rows only: keyset {keyset:.1f} ms, OFFSET (peer) {offset:.1f} ms  (keyset {offset / keyset:.2f}x faster)"
        )
        print(f"  filter 'port 443 and comm nginx and retrans > 0' {filtered:8.1f} ms per request")
        print(f"  first page sorted by bytes (computed) {by_bytes:8.1f} ms per request")
        print(f"  first page sorted by opening time     {by_start:8.1f} ms per request  (first_seen has no index)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
