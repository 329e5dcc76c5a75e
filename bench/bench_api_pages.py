"""Benchmark: the read API's /api/connections with 100,000 connections stored (SQLite, or PostgreSQL with --postgres URL).

`main()` fills a temporary database with N Connection rows (default 100,000) and times
whole requests through Django's test client: the first page, a page half-way down
reached by its keyset cursor, and pages filtered by port (either side), address
(either side) and process. The peer, measured in the same run on the same rows, is
OFFSET pagination of the same half-way page: the ratio shows what the cursor saves.
Helpers shared with bench_dashboard_pages.py: django_pages.py.
Keep in sync with: webapp/api/views.py, webapp/api/rows.py, docs/benchmarks.md ("## Read API").
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from django_pages import is_postgres, logged_in_client, page_request, populate, setup, stored, timed  # noqa: E402

PAGE = 100
COMMS = ("nginx", "postgres", "sshd", "curl", "python3")


def connection(i: int) -> Any:
    from webapp.traces.models import Connection

    return Connection(
        host_id=f"host{i % 4}", boot_id="b", conn_uuid=f"c{i:08d}", src=f"10.0.{i % 250}.1",
        sport=40000 + i % 20000, dst=f"10.1.{i % 200}.2", dport=(443, 5432, 22, 80)[i % 4],
        first_seen=1_700_000_000.0 + i, last_seen=1_700_000_000.0 + i + i % 50,
        comm=COMMS[i % len(COMMS)], pid=1000 + i % 700, uid=i % 3 * 1000, anomaly=i % 101 == 0,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_api_pages")
    parser.add_argument("--connections", type=int, default=100_000)
    parser.add_argument("--data", help="keep the database here (reused when it exists) instead of a temporary one")
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="PostgreSQL (postgres://...): its test database, kept with its rows between runs",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nettrail-bench-") as tmp:
        data_dir = args.data or tmp
        setup(data_dir, args.postgres, "api_pages")
        from webapp.api.params import decode_cursor, encode_cursor
        from webapp.api.rows import CONNECTION_COLUMNS, keyset_page
        from webapp.traces.models import Connection

        t0 = time.perf_counter()
        if stored() != args.connections:
            Connection.objects.all().delete()
            populate(args.connections, connection)
        where = "PostgreSQL" if is_postgres() else "SQLite"
        print(
            f"read API ({where}): {Connection.objects.count():,} connections stored in {time.perf_counter() - t0:.1f} s"
        )
        get = page_request(logged_in_client(), "/api/connections", "connections", PAGE)
        half = Connection.objects.count() // 2
        ordered = Connection.objects.order_by("-last_seen", "-id")
        mid = ordered.values("last_seen", "id")[half - 1]
        cursor = encode_cursor([mid["last_seen"], mid["id"]])

        def offset_rows() -> None:  # the peer: the same half-way page by OFFSET (query only)
            rows = list(ordered.values(*CONNECTION_COLUMNS)[half : half + PAGE])
            assert len(rows) == PAGE

        def cursor_rows() -> None:  # the API's query for that page, without HTTP and JSON
            qs = Connection.objects.all()
            rows, _ = keyset_page(qs, "last_seen", CONNECTION_COLUMNS, PAGE, decode_cursor(cursor))
            assert len(rows) == PAGE

        first = timed(get())
        deep = timed(get(cursor=cursor))
        by_cursor = timed(cursor_rows)
        by_offset = timed(offset_rows)
        page = f"page {half // PAGE:,}"
        print(f"  first page                          {first:8.1f} ms per request")
        print(f"  {page} by cursor              {deep:8.1f} ms per request  ({deep / first:.2f}x the first page)")
        print(f"  {page} query only: cursor {by_cursor:.2f} ms, by OFFSET (peer) {by_offset:.2f} ms", end="")
        print(f"  (cursor {by_offset / by_cursor:.1f}x faster)")
        either_side = {"port=443 (either side)": {"port": "443"}, "addr=10.1.7.2 (either side)": {"addr": "10.1.7.2"}}
        plain = {"host=host1": {"host": "host1"}, "comm=curl&uid=1000": {"comm": "curl", "uid": "1000"}}
        plain["has_anomaly=true"] = {"has_anomaly": "true"}
        for label, params in {**either_side, **plain}.items():
            ms = timed(get(**params))
            print(f"  {label:<35} {ms:8.1f} ms per request  ({ms / first:.2f}x the first page)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
