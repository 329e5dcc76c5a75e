"""Benchmark: how far the live websocket's rows run behind ingest at --rate records/s
(issue 31 item 4: <= 1 s at 10,000 records/s).

A real server (tests/daphne_server.py: `python -m webapp.serve`, daphne, its own SQLite
data directory and in-memory channel layer) receives the pages-at-volume benchmark's
record mix (siftr samples, skb events and drops, state changes, retransmissions) over
HTTP, --batch records per POST at --rate records/s for --seconds, from --posters
threads; each record's ts_wall is the moment its batch is made. A `websockets` client,
logged in and subscribed to the host, reads and acknowledges every message; a record's
lag is when its message arrived minus its ts_wall (ingest, storage, the push and the
websocket included). Prints the rate reached, lag p50 / p95 / max and records missed.
Keep in sync with: docs/benchmarks.md ("Dashboard pages at volume").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

HOST = "live-host"


def post_all(srv: Any, args: argparse.Namespace, posted: list[tuple[float, float]], k: int) -> None:
    """Poster k of args.posters: every args.posters-th batch, on schedule."""
    import bench_pages_at_volume as vol
    import requests

    from translators.records import to_json

    period = args.batch / args.rate * args.posters
    session = requests.Session()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {srv.token}"}
    start = time.time()
    for n in range(int(args.seconds * args.rate / args.batch / args.posters)):
        seq = (n * args.posters + k) * args.batch
        due = start + n * period + k * period / args.posters
        wait = due - time.time()
        if wait > 0:
            time.sleep(wait)
        now = time.time()
        recs = [vol.record(s, s // vol.PER_CONN, now, vol.BOOT) for s in range(seq, seq + args.batch)]
        body = b"[" + b",".join(to_json(_on(r)) for r in recs) + b"]"
        answer = session.post(f"{srv.url}/api/ingest", data=body, headers=headers, timeout=120)
        assert answer.status_code == 200, answer.text
        posted.append((now, time.time()))


def _on(rec: Any) -> Any:
    import msgspec

    from translators.records import connection_uuid

    # the record's connection as its collector would name it (ingest checks it: owner.py)
    return msgspec.structs.replace(rec, host_id=HOST, conn_uuid=connection_uuid(HOST, rec.boot_id, rec.sock_cookie))


async def read(srv: Any, want: int, lags: list[float], others: list[dict[str, Any]]) -> None:
    import websockets

    ws = await websockets.connect(
        f"ws://127.0.0.1:{srv.port}/ws/live/",
        additional_headers={"Cookie": srv.session_cookie(), "Origin": srv.url},
        max_size=None,
    )
    await ws.send(json.dumps({"subscribe": {"host": HOST}}))
    assert json.loads(await ws.recv())["type"] == "subscribed"
    ready.set()
    got = 0
    while got < want:
        message = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
        arrived = time.time()
        if message["type"] != "records":
            others.append(message)
            if message["type"] == "gap":
                got += message.get("missed", 0)
            continue
        lags.extend(arrived - r["ts_wall"] for r in message["records"])
        got += len(message["records"])
        await ws.send(json.dumps({"ack": message["id"]}))
    await ws.close()


ready = threading.Event()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_live_lag")
    parser.add_argument("--rate", type=int, default=10_000, help="records/s posted")
    parser.add_argument("--batch", type=int, default=1000, help="records per POST")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--posters", type=int, default=4, help="threads posting, each its share of the batches")
    args = parser.parse_args(argv)
    from daphne_server import running_webapp

    want = int(args.seconds * args.rate / args.batch / args.posters) * args.posters * args.batch
    lags: list[float] = []
    others: list[dict[str, Any]] = []
    posted: list[tuple[float, float]] = []
    with running_webapp({"NETTRAIL_LIVE_MAX_BUFFER": "200000"}, prefix="nettrail-live-lag-", host=HOST) as srv:
        posters = [
            threading.Thread(target=lambda k=k: (ready.wait(60), post_all(srv, args, posted, k)))
            for k in range(args.posters)
        ]
        for poster in posters:
            poster.start()
        load0 = os.getloadavg()[0]
        asyncio.run(read(srv, want, lags, others))
        for poster in posters:
            poster.join()
    span = max(b for _a, b in posted) - min(a for a, _b in posted) if posted else 0.0
    lags.sort()
    post_ms = sorted((b - a) * 1000 for a, b in posted)
    print(f"live lag ({args.rate:,} records/s asked, {args.batch} per POST, {args.posters} posters, {args.seconds:.0f} s; "
          f"load {load0:.1f} -> {os.getloadavg()[0]:.1f})")  # fmt: skip
    print(f"  posted {len(posted) * args.batch:,} records in {span:.1f} s: {len(posted) * args.batch / span:,.0f}/s; "
          f"POST p50 {statistics.median(post_ms):.0f} ms, p95 {post_ms[int(0.95 * (len(post_ms) - 1))]:.0f} ms")  # fmt: skip
    if lags:
        p95 = lags[int(0.95 * (len(lags) - 1))]
        print(f"  received {len(lags):,} records: lag p50 {statistics.median(lags) * 1000:.0f} ms, "
              f"p95 {p95 * 1000:.0f} ms, max {lags[-1] * 1000:.0f} ms (target 1000 ms)")  # fmt: skip
    print(f"  other messages: {[m['type'] for m in others][:10]} (a gap: records the socket missed)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
