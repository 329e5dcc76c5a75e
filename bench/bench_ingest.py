"""Benchmark: records/s through the real ingest path into SQLite, against raw sqlite3.

`main()` migrates a fresh SQLite database (WAL, the production settings) in a
temporary data directory, builds N records of a realistic mix (SIFTR samples, skb
events, state changes, retransmits, drops over 1,000 connections, full envelope
and attribution), encodes them as MessagePack batches and POSTs every batch to
/api/ingest through Django's test client (middleware, bearer token, decode,
validation, duplicate check, insert, Connection updates, channel-layer push). The
peer, in the same run: a copy of the same empty schema (same indexes) filled with
the same rows, pre-built as tuples, by sqlite3 ``executemany`` in one transaction per
batch -- the floor any Python ingest into this schema pays. Both run as the server
does (webapp/serve.py: tune_gc(), background WAL checkpoints; one warm-up request).
Prints both rates and their ratio. Target (issue 6): at least 50,000 records/s through ingest.
Keep in sync with: webapp/traces/ingest.py, store.py; docs/benchmarks.md ("## Ingest").
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET = 50_000  # records/s
KINDS = (("siftr_sample", 4), ("skb_event", 3), ("tcp_state", 1), ("tcp_retransmit", 1), ("skb_drop", 1))


def setup(data_dir: str) -> None:
    os.environ["NETTRAIL_DATA"] = data_dir
    os.environ.pop("DATABASE_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "webapp.settings"
    os.environ["CHANNEL_LAYER"] = "memory"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def make_records(count: int, host: str) -> list[Any]:
    from translators import records as r

    out: list[Any] = []
    pattern = [kind for kind, weight in KINDS for _ in range(weight)]
    for seq in range(count):
        conn = seq % 1000
        base: dict[str, Any] = {
            "host_id": host, "boot_id": "boot-bench", "seq": seq, "ts_ns": 10**12 + seq * 1000,
            "ts_wall": 1.7e9 + seq / 1e5, "cpu": seq % 2, "netns": 4026531840, "ctx": "task",
            "conn_uuid": r.connection_uuid(host, "boot-bench", conn + 1), "sock_cookie": conn + 1, "pid": 1000 + conn,
            "tgid": 1000 + conn, "comm": "iperf3", "uid": 1000, "gid": 1000, "cgroup_id": 1,
            "attribution": "current", "ip_ver": 4, "src": "10.0.0.1", "sport": 40000 + conn, "dst": "10.0.0.2",
            "dport": 5201,
        }  # fmt: skip
        out.append(_record(r, pattern[seq % len(pattern)], base, seq))
    return out


def _record(r: Any, kind: str, base: dict[str, Any], seq: int) -> Any:
    if kind == "siftr_sample":
        return r.SiftrSample(**base, provider="siftr", probe="siftr", direction="out", snd_cwnd=14480 + seq % 100,
                             snd_ssthresh=2**31, snd_wnd=65535, rcv_wnd=65535, srtt=250, rttvar=50, rto=200000,
                             mss=1448, sent_inflight_bytes=seq % 65536, snd_una=seq, snd_nxt=seq + 1448)  # fmt: skip
    if kind == "skb_event":
        return r.SkbEvent(**base, provider="skb", probe="m-stage", stage="xmit", skb_uid=seq, skb_gen=1, len=1500,
                          truesize=2304, if_index=1, if_name="lo", since_prev_ns=1200)  # fmt: skip
    if kind == "tcp_state":
        return r.TcpStateChange(**base, provider="tcp", probe="state-change", prev_state="SYN_SENT",
                                state="ESTABLISHED", active=True)  # fmt: skip
    if kind == "tcp_retransmit":
        return r.TcpRetransmit(**base, provider="tcp", probe="retransmit", state="ESTABLISHED", tcp_seq=seq,
                               tcp_payload_len=1448, retrans_kind="fast")  # fmt: skip
    return r.SkbDrop(**base, provider="skb", probe="m-free", drop_reason=2, drop_reason_str="NO_SOCKET",
                     drop_location="tcp_v4_rcv+0x1f4", len=60)  # fmt: skip


def warm_up(token: str) -> None:
    """One empty batch: the first request imports the view's modules, once per server."""
    from django.test import Client

    resp = Client(SERVER_NAME="127.0.0.1").post(
        "/api/ingest", b"\x90", content_type="application/msgpack", HTTP_AUTHORIZATION=f"Bearer {token}"
    )
    if resp.status_code != 200:
        raise SystemExit(f"warm-up failed: {resp.status_code} {resp.content[:200]!r}")


def bench_ingest(batches: list[bytes], token: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) to POST every batch."""
    from django.test import Client

    client = Client(SERVER_NAME="127.0.0.1")
    auth = f"Bearer {token}"
    start, cpu = time.perf_counter(), time.process_time()
    for body in batches:
        resp = client.post("/api/ingest", body, content_type="application/msgpack", HTTP_AUTHORIZATION=auth)
        if resp.status_code != 200:
            raise SystemExit(f"ingest failed: {resp.status_code} {resp.content[:200]!r}")
    return time.perf_counter() - start, time.process_time() - cpu


def bench_raw(db_path: Path, record_batches: list[list[Any]]) -> tuple[float, float]:
    """The same rows, pre-built, inserted by sqlite3 alone (the SQL that store.py runs)."""
    from django.conf import settings
    from django.db import connection

    from webapp.traces.checkpoint import SAFETY_NET_PAGES, start_checkpointer
    from webapp.traces.store import _table

    sql_rows: list[list[tuple[str, list[tuple[Any, ...]]]]] = []
    for records in record_batches:
        per_kind: dict[str, list[tuple[Any, ...]]] = {}
        for rec in records:
            per_kind.setdefault(rec.kind, []).append(_table(rec.kind).row(rec))
        # The INSERT store.py runs: without the columns NULL in every row of the group.
        pruned = [_table(kind).pruned(rows) for kind, rows in per_kind.items()]
        sql_rows.append([(sql.replace("%s", "?"), rows) for sql, rows in pruned])
    connection.close()
    db = sqlite3.connect(db_path, isolation_level=None)
    db.executescript(settings.DATABASES["default"]["OPTIONS"]["init_command"])  # the same pragmas as the webapp
    db.execute(f"PRAGMA wal_autocheckpoint={SAFETY_NET_PAGES}")  # and the same background checkpoints
    checkpointer = start_checkpointer(settings.NETTRAIL_CHECKPOINT_INTERVAL, str(db_path))
    start, cpu = time.perf_counter(), time.process_time()
    for batch in sql_rows:
        db.execute("BEGIN IMMEDIATE")
        for sql, rows in batch:
            db.executemany(sql, rows)
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start, time.process_time() - cpu
    checkpointer.stop()
    db.close()
    return elapsed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=5000, help="records per POST (the sink's batch size)")
    args = parser.parse_args(argv)
    if _django_already_configured():
        # bench/run.py runs every benchmark in one process: another one may have set up
        # Django on its own database. Measure in a fresh interpreter instead.
        command = [sys.executable, __file__, "--records", str(args.records), "--batch", str(args.batch)]
        return subprocess.run(command, cwd=ROOT, check=False).returncode
    data_dir = tempfile.mkdtemp(prefix="nettrail-bench-ingest-")
    try:
        return run(Path(data_dir), args.records, args.batch)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _django_already_configured() -> bool:
    if "django.conf" not in sys.modules:
        return False
    from django.conf import settings

    return bool(settings.configured)


def run(data_dir: Path, count: int, batch: int) -> int:
    setup(str(data_dir))
    import msgspec
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from webapp.serve import tune_gc
    from webapp.traces.checkpoint import start_checkpointer
    from webapp.traces.tokens import create_token

    call_command("migrate", verbosity=0, interactive=False)
    _, token = create_token("bench")
    connection.close()
    raw_db = data_dir / "raw.sqlite3"
    shutil.copy(data_dir / "nettrail.sqlite3", raw_db)  # same empty schema, same indexes
    records = make_records(count, "bench")
    record_batches = [records[i : i + batch] for i in range(0, count, batch)]
    bodies = [msgspec.msgpack.encode(b) for b in record_batches]
    # As webapp/serve.py does: WAL checkpoints in a background thread, and its tune_gc().
    checkpointer = start_checkpointer(settings.NETTRAIL_CHECKPOINT_INTERVAL, str(data_dir / "nettrail.sqlite3"))
    warm_up(token)
    tune_gc()
    ingest_s, ingest_cpu = bench_ingest(bodies, token)
    checkpointer.stop()
    raw_s, raw_cpu = bench_raw(raw_db, record_batches)
    ingest_rate, raw_rate = count / ingest_s, count / raw_s
    print(f"ingest: {count} records in batches of {batch}, SQLite WAL")
    print(f"  /api/ingest (token, decode+validate, dedupe, insert, connections, push): {ingest_rate:10,.0f} records/s"
          f"  ({count / ingest_cpu:,.0f} per CPU-second)")  # fmt: skip
    print(f"  raw sqlite3 executemany of the same pre-built rows:                    {raw_rate:10,.0f} records/s"
          f"  ({count / raw_cpu:,.0f} per CPU-second)")  # fmt: skip
    print(f"  ratio ingest/raw: {ingest_rate / raw_rate:.2f}")
    verdict = "met" if ingest_rate >= TARGET else "NOT met (see the CPU-second rate on a busy machine)"
    print(
        f"  target >= {TARGET:,} records/s: {verdict}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
