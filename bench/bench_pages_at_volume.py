"""Benchmark: every dashboard page and /api/dash/ view at volume (issue 31 item 4), SQLite or PostgreSQL.

Fills a database once with --connections Connection rows (default 1,000,000) over four
hosts, --alerts alert record rows (default 100,000: three versions of each alert id) and
--records trace records (default 10,000,000: the ingest benchmark's mix of siftr samples,
skb events and drops, state changes and retransmissions, ten per connection), then keeps
it (SQLite: the --data directory; PostgreSQL: Django's test database of --postgres URL)
so that later runs only time. Before timing, each run replaces a "live" slab: the last
10 seconds' records at 10,000 records/s (100,000 rows) and 1,000 connections opened in
them, so the Overview's rates count a full window as they would under that ingest.

Every page the dashboard serves and every /api/dash/ view its scripts fetch is requested
--repeat times through Django's test client, logged in; the table gives p50 and p95 per
request and the worst p95. Target: p95 <= 200 ms for each.
Keep in sync with: webapp/dashboard/urls.py (the requests), docs/benchmarks.md
("## Dashboard pages at volume").
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from django_pages import is_postgres, logged_in_client, setup  # noqa: E402

HOSTS = 4
PER_CONN = 10  # records per connection
LIVE_RATE = 10_000  # records/s in the live slab
LIVE_S = 10
LIVE_CONNS = 1000
CHUNK = 50_000  # records per insert transaction
TARGET_MS = 200.0
BOOT = "boot"
LIVE_KINDS = ("siftr_sample", "skb_event", "tcp_state", "tcp_retransmit", "skb_drop")  # what record() makes
COMMS = ("nginx", "postgres", "sshd", "curl", "python3", "redis-server", "node")
RULES = ("K1", "K2", "K3", "K4", "K5", "K7", "K12", "P4")
SEVERITIES = ("info", "notice", "warning", "critical")


def _uuid(i: int) -> str:
    from translators.records import connection_uuid

    return connection_uuid("bench", BOOT, i)


def conn_row(i: int, t0: float, boot: str = BOOT) -> Any:
    from webapp.traces.models import Connection

    return Connection(
        host_id=f"host{i % HOSTS}", boot_id=boot, conn_uuid=_uuid(i), proto="tcp",
        src="10.0.0.1", sport=(443, 5432, 22, 40000 + i % 20000)[i % 4], dst=f"10.0.{i % 250}.{i % 200}",
        dport=30000 + i % 30000, state=("ESTABLISHED", "CLOSED", "TIME_WAIT")[i % 3], closed=i % 3 == 1,
        first_seen=t0 + i * 0.01, last_seen=t0 + i * 0.01 + (i % 97),
        bytes_orig=(i * 7919) % 10_000_000, bytes_resp=(i * 104729) % 1_000_000, retransmits=i % 11 // 9,
        pid=1000 + i % 500, tgid=1000 + i % 500, comm=COMMS[i % len(COMMS)], uid=i % 3 * 1000,
    )  # fmt: skip


def record(seq: int, conn: int, ts: float, boot: str) -> Any:
    from translators import records as r

    base: dict[str, Any] = {
        "host_id": f"host{conn % HOSTS}", "boot_id": boot, "seq": seq, "ts_ns": 10**12 + seq * 1000, "ts_wall": ts,
        "cpu": seq % 2, "netns": 4026531840, "ctx": "task", "conn_uuid": _uuid(conn), "sock_cookie": conn + 1,
        "pid": 1000 + conn % 500, "tgid": 1000 + conn % 500, "comm": COMMS[conn % len(COMMS)], "uid": 1000,
        "ip_ver": 4, "src": "10.0.0.1", "sport": 40000 + conn % 20000, "dst": "10.0.0.2", "dport": 5201,
    }  # fmt: skip
    kind = seq % 10
    if kind < 4:
        return r.SiftrSample(**base, provider="siftr", probe="siftr", direction="out", snd_cwnd=14480,
                             snd_ssthresh=2**31, snd_wnd=65535, rcv_wnd=65535, srtt=250, rttvar=50, rto=200000,
                             mss=1448, sent_inflight_bytes=seq % 65536, snd_una=seq, snd_nxt=seq + 1448)  # fmt: skip
    if kind < 7:
        return r.SkbEvent(**base, provider="skb", probe="m-stage", stage="xmit", skb_uid=seq, skb_gen=1, len=1500,
                          truesize=2304, if_index=1, if_name="lo", since_prev_ns=1200)  # fmt: skip
    if kind == 7:
        return r.TcpStateChange(**base, provider="tcp", probe="state-change", prev_state="SYN_SENT",
                                state="ESTABLISHED", active=True)  # fmt: skip
    if kind == 8:
        return r.TcpRetransmit(**base, provider="tcp", probe="retransmit", state="ESTABLISHED", tcp_seq=seq,
                               tcp_payload_len=1448, retrans_kind="fast")  # fmt: skip
    return r.SkbDrop(**base, provider="skb", probe="m-free", skb_uid=seq, drop_reason=2, drop_reason_str="NO_SOCKET",
                     drop_location="tcp_v4_rcv+0x1f4", len=60)  # fmt: skip


def alert(i: int, t0: float, connections: int) -> Any:
    """Version i % 3 of alert i // 3: the third version closes it."""
    from translators.records_health import Alert

    n, version = divmod(i, 3)
    conn = (n * 7) % connections
    return Alert(
        host_id=f"host{conn % HOSTS}", boot_id="alerts", seq=i, ts_ns=i, ts_wall=t0 + i * 0.1, provider="nettrail",
        probe="rule", conn_uuid=_uuid(conn), src="10.0.0.1", sport=40000 + conn % 20000, dst="10.0.0.2", dport=5201,
        rule_id=RULES[n % len(RULES)], alert_id=f"al-{n}", severity=SEVERITIES[(n + version) % 4],
        status="closed" if version == 2 else "open", start=t0 + n * 0.3, end=t0 + i * 0.1, count=version + 1,
        message=f"bench alert {n}", metric=float(version + n % 5), evidence=[n * 10, n * 10 + 1],
    )  # fmt: skip


def insert(records: list[Any]) -> None:
    """Store records as ingest does (no Connection fold; of the hooks, only the buffers
    page's drop counts): COPY on PostgreSQL, executemany on SQLite."""
    from django.db import connection, transaction

    from webapp.traces import drop_summary

    if is_postgres():
        from webapp.traces import pgcopy

        with transaction.atomic():
            pgcopy.store(records)
            _run(drop_summary.tally(records))
        return
    from webapp.traces.store import _table

    per_kind: dict[str, list[tuple[Any, ...]]] = {}
    for rec in records:
        per_kind.setdefault(rec.kind, []).append(_table(rec.kind).row(rec))
    with transaction.atomic(), connection.cursor() as cursor:
        for kind, rows in per_kind.items():
            sql, kept = _table(kind).pruned(rows)
            cursor.executemany(sql, kept)
        _run(drop_summary.tally(records))


def _run(write: Callable[[], None] | None) -> None:
    if write is not None:
        write()


def insert_connections(rows: list[Any]) -> None:
    """Unsaved Connection rows in one executemany on SQLite (bulk_create splits a batch
    into statements of 999 parameters there: 1,122 s per million); bulk_create on PostgreSQL."""
    from django.db import connection, transaction

    from webapp.traces.models import Connection

    if is_postgres():
        Connection.objects.bulk_create(rows)
        return
    fields = [f for f in Connection._meta.concrete_fields if not f.primary_key]
    names = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = f"INSERT INTO {Connection._meta.db_table} ({names}) VALUES ({', '.join(['%s'] * len(fields))})"
    values = [tuple(f.get_db_prep_save(f.pre_save(row, True), connection) for f in fields) for row in rows]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.executemany(sql, values)


@contextlib.contextmanager
def indexes_deferred(tables: list[str]) -> Iterator[None]:
    """SQLite: the tables' non-unique indexes dropped while the block fills them, then
    created again (one sort each instead of a random insert per row into each)."""
    from django.db import connection

    if is_postgres():
        yield
        return
    marks = ", ".join(["%s"] * len(tables))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
            f"AND sql NOT LIKE 'CREATE UNIQUE%%' AND tbl_name IN ({marks})",
            tables,
        )
        kept = cursor.fetchall()
        for name, _sql in kept:
            cursor.execute(f'DROP INDEX "{name}"')
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for _name, sql in kept:
                cursor.execute(sql)


def chunks(make: Callable[[int], Any], count: int, size: int = CHUNK) -> Iterator[list[Any]]:
    for start in range(0, count, size):
        yield [make(i) for i in range(start, min(count, start + size))]


def fill(args: argparse.Namespace, t_end: float) -> None:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from webapp.traces.models import KIND_MODELS, Connection, Host

    call_command("migrate", verbosity=0, interactive=False)
    for h in range(HOSTS):
        Host.objects.get_or_create(name=f"host{h}")
    get_user_model().objects.get_or_create(username="bench")
    span = args.connections * 0.01
    t0 = t_end - span - 100
    started = time.perf_counter()
    with indexes_deferred([Connection._meta.db_table]):
        for rows in chunks(lambda i: conn_row(i, t0), args.connections, 5000):
            insert_connections(rows)
    print(f"  {args.connections:,} connections in {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()
    for recs in chunks(lambda i: alert(i, t0, args.connections), args.alerts):
        insert(recs)
    print(f"  {args.alerts:,} alerts in {time.perf_counter() - started:.0f} s", flush=True)
    started = time.perf_counter()
    step = span / max(args.records, 1)
    with indexes_deferred([KIND_MODELS[kind]._meta.db_table for kind in LIVE_KINDS]):
        for n, recs in enumerate(chunks(lambda s: record(s, s // PER_CONN, t0 + s * step, BOOT), args.records)):
            insert(recs)
            if n % 20 == 19:
                done = (n + 1) * CHUNK
                rate = done / (time.perf_counter() - started)
                print(f"  {done:,} records, {rate:,.0f} records/s", flush=True)
    print(f"  {args.records:,} records in {time.perf_counter() - started:.0f} s", flush=True)
    if is_postgres():
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")  # as autovacuum would have
    else:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def live_slab(args: argparse.Namespace) -> None:
    """Replace the previous run's last-10-seconds slab with one ending now."""
    from django.db import transaction

    from webapp.traces import drop_summary
    from webapp.traces.models import KIND_MODELS, Connection

    now = time.time()
    with transaction.atomic():
        hosts = [f"host{h}" for h in range(HOSTS)]
        live_drops = KIND_MODELS["skb_drop"].objects.filter(host_id__in=hosts, boot_id="live")
        drop_summary.forget_rows(live_drops.values_list(*drop_summary.FIELDS))  # as retention does
        for kind in LIVE_KINDS:  # by the (host_id, boot_id, seq) unique index
            KIND_MODELS[kind].objects.filter(host_id__in=hosts, boot_id="live").delete()
        Connection.objects.filter(host_id__in=hosts, boot_id="live").delete()
    base = args.connections  # connection numbers past the filled ones
    t0 = now - LIVE_S
    rows = [conn_row(base + i, t0 - (base + i) * 0.01 + i * 0.01, "live") for i in range(LIVE_CONNS)]
    Connection.objects.bulk_create(rows)
    count = LIVE_RATE * LIVE_S
    step = LIVE_S / count
    for recs in chunks(lambda s: record(s, base + s % LIVE_CONNS, t0 + s * step, "live"), count):
        insert(recs)


def requests(args: argparse.Namespace) -> list[tuple[str, str, dict[str, str]]]:
    """(label, url, params): every page and every /api/dash/ view the pages fetch."""
    from webapp.dashboard.tables import Alert

    mid = min(args.connections, args.records // PER_CONN) // 2  # a connection half-way, with its records
    conn = _uuid(mid)
    host = f"host{mid % HOSTS}"
    alert_pk = Alert.objects.order_by("-id").values_list("id", flat=True).first()
    skb_uid = mid * PER_CONN + 4  # a skb_event of that connection
    return [
        ("page /", "/", {}),
        ("page /connections/", "/connections/", {}),
        ("page /connections/<uuid>/", f"/connections/{conn}/", {}),
        ("page /buffers/", "/buffers/", {}),
        ("page /udp/", "/udp/", {}),
        ("page /counters/", "/counters/", {}),
        ("page /alerts/", "/alerts/", {}),
        ("page /status/", "/status/", {}),
        ("page /status/tracing/", "/status/tracing/", {"host": host}),
        ("page /captures/", "/captures/", {}),
        ("api overview", "/api/dash/overview", {}),
        ("api connections", "/api/dash/connections", {}),
        ("api connections host filter", "/api/dash/connections", {"q": "host host1 and retrans > 0"}),
        ("api connection", f"/api/dash/connections/{conn}", {"host": host}),
        ("api connection stitched", f"/api/dash/connections/{conn}/stitched", {"host": host}),
        ("api buffers", "/api/dash/buffers", {}),
        ("api buffers host", "/api/dash/buffers", {"host": host}),
        ("api skb", f"/api/dash/skb/{skb_uid}", {"host": host}),
        ("api udp", "/api/dash/udp", {}),
        ("api ip-flows", "/api/dash/ip-flows", {}),
        ("api stack-counters", "/api/dash/stack-counters", {}),
        ("api alerts", "/api/dash/alerts", {}),
        ("api alerts host, unacked", "/api/dash/alerts", {"host": host, "acked": "no"}),
        ("api alert evidence", f"/api/dash/alerts/{alert_pk}/evidence", {}),
        ("api status", "/api/dash/status", {}),
    ]


def timings(client: Any, url: str, params: dict[str, str], repeat: int) -> list[float]:
    resp = client.get(url, params)  # warm-up, and the answer checked
    # a stitched view's 404 is its answer for a connection traced at one end only
    assert resp.status_code in (200, 302) or url.endswith("/stitched"), (url, resp.status_code, resp.content[:300])
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        client.get(url, params)
        samples.append((time.perf_counter() - t0) * 1000)
    return sorted(samples)


def p95(samples: list[float]) -> float:
    return samples[min(len(samples) - 1, int(round(0.95 * (len(samples) - 1))))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_pages_at_volume")
    parser.add_argument("--connections", type=int, default=1_000_000)
    parser.add_argument("--alerts", type=int, default=100_000)
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--data", default="/tmp/nettrail-bench-volume", help="SQLite data directory, kept")
    parser.add_argument("--postgres", metavar="URL", help="PostgreSQL: its test database, kept with its rows")
    parser.add_argument("--only", help="time only the requests whose label contains this")
    parser.add_argument(
        "--recount", action="store_true", help="recount the buffers page's drop counts from the stored drops "
        "(a database filled while migration 0035 was applied, or by a filler that did not keep them)"
    )  # fmt: skip
    args = parser.parse_args(argv)
    Path(args.data).mkdir(parents=True, exist_ok=True)
    setup(args.data, args.postgres, "pages_at_volume")
    from django.core.management import call_command

    from webapp.traces.models import Connection

    call_command("migrate", verbosity=0, interactive=False)
    where = "PostgreSQL" if is_postgres() else "SQLite"
    if not Connection.objects.filter(boot_id=BOOT).exists():
        print(f"filling ({where}) ...", flush=True)
        fill(args, time.time())
    if args.recount:
        from webapp.traces import drop_summary

        started = time.perf_counter()
        drop_summary.rebuild()
        print(f"drop counts recounted in {time.perf_counter() - started:.1f} s", flush=True)
    started = time.perf_counter()
    live_slab(args)
    print(
        f"live slab ({LIVE_RATE * LIVE_S:,} records, {LIVE_CONNS:,} connections) in {time.perf_counter() - started:.1f} s"
    )
    client = logged_in_client()
    print(f"pages at volume ({where}): {args.connections:,} connections, {args.alerts:,} alerts, "
          f"{args.records:,} records; {args.repeat} requests each")  # fmt: skip
    worst = 0.0
    for label, url, params in requests(args):
        if args.only and args.only not in label:
            continue
        samples = timings(client, url, params, args.repeat)
        worst = max(worst, p95(samples))
        flag = "" if p95(samples) <= TARGET_MS else "  > target"
        print(f"  {label:34s} p50 {statistics.median(samples):8.1f} ms  p95 {p95(samples):8.1f} ms{flag}", flush=True)
    print(f"  worst p95 {worst:.1f} ms (target {TARGET_MS:.0f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
