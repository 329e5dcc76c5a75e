"""Benchmark: the connections table's pages with 100,000 connections stored (SQLite, or PostgreSQL with --postgres URL).

`main()` fills a temporary database with N Connection rows (default 100,000), then times
whole requests to /api/dash/connections (filter, count, page, JSON) through Django's test
client: the first page (latest activity first), a page half-way down reached by its keyset cursor, a filtered
page and a page sorted by a computed column. The peer, measured in the same run on the
same rows, is OFFSET pagination of the same half-way page (what the dashboard avoids):
the ratio (rows only, both ways) shows what keyset paging saves deep in the table.
Helpers shared with bench_api_pages.py: django_pages.py.
Keep in sync with: webapp/dashboard/queries.py, docs/benchmarks.md ("## Dashboard").
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

PAGE = 50
COMMS = ("nginx", "postgres", "sshd", "curl", "python3", "redis-server", "node")


def connection(i: int) -> Any:
    from translators.records import connection_uuid
    from webapp.traces.models import Connection

    return Connection(
        host_id=f"host{i % 4}", boot_id="boot", conn_uuid=connection_uuid("bench", "boot", i), proto="tcp",
        src="10.0.0.1", sport=(443, 5432, 22, 40000 + i % 20000)[i % 4], dst=f"10.0.{i % 250}.{i % 200}",
        dport=30000 + i % 30000, state=("ESTABLISHED", "CLOSED", "TIME_WAIT")[i % 3], closed=i % 3 == 1,
        first_seen=1_700_000_000.0 + i * 0.01, last_seen=1_700_000_000.0 + i * 0.01 + (i % 97),
        bytes_orig=(i * 7919) % 10_000_000, bytes_resp=(i * 104729) % 1_000_000, retransmits=i % 11 // 9,
        pid=1000 + i % 500, tgid=1000 + i % 500, comm=COMMS[i % len(COMMS)], uid=i % 3 * 1000,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_dashboard_pages")
    parser.add_argument("--connections", type=int, default=100_000)
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="PostgreSQL (postgres://...): its test database, kept with its rows between runs",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="nettrail-bench-") as data_dir:
        setup(data_dir, args.postgres, "dashboard_pages")
        from webapp.dashboard import queries
        from webapp.traces.models import Connection

        t0 = time.perf_counter()
        if stored() != args.connections:
            Connection.objects.all().delete()
            populate(args.connections, connection)
        where = "PostgreSQL" if is_postgres() else "SQLite"
        print(f"dashboard pages ({where}): {args.connections:,} connections stored in {time.perf_counter() - t0:.1f} s")
        get = page_request(logged_in_client(), "/api/dash/connections", "rows", PAGE)
        half = args.connections // 2
        qs = queries.annotated()
        mid = qs.annotate(sort_key=queries.SORTS["last"].expr).order_by("-sort_key", "-id")[half - 1]
        cursor = queries.encode_cursor(mid.sort_key, mid.pk)

        def keyset_page() -> None:  # rows only, the same way as the peer below
            assert len(queries.page(qs, "-last", cursor, PAGE).rows) == PAGE

        def offset_page() -> None:  # the peer: the same half-way page by OFFSET
            rows = list(qs.order_by("-last_seen", "-id")[half : half + PAGE])
            assert len(rows) == PAGE

        first = timed(get())
        deep = timed(get(cursor=cursor))
        offset = timed(offset_page)
        keyset = timed(keyset_page)
        filtered = timed(get(q="port 443 and comm nginx and retrans > 0"))
        by_bytes = timed(get(sort="-bytes"))
        by_start = timed(get(sort="-start"))
        print(f"  first page (latest activity first)    {first:8.1f} ms per request")
        print(
            f"  page {half // PAGE:,} by keyset cursor          {deep:8.1f} ms per request  ({deep / first:.2f}x the first page)"
        )
        print(
            f"  page {half // PAGE:,} rows only: keyset {keyset:.1f} ms, OFFSET (peer) {offset:.1f} ms  (keyset {offset / keyset:.2f}x faster)"
        )
        print(f"  filter 'port 443 and comm nginx and retrans > 0' {filtered:8.1f} ms per request")
        print(f"  first page sorted by bytes (computed) {by_bytes:8.1f} ms per request")
        print(f"  first page sorted by opening time     {by_start:8.1f} ms per request  (index nt_conn_first)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
