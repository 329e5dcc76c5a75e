"""A real HTTP ingest server (http.server in a thread) for the HTTP sink tests, without Django.

It speaks the ingest contract of docs/api.md: bearer token, a MessagePack array of
records, 200 {"stored", "duplicates"} idempotent on (host, boot, seq). Knobs let a test
make it fail: `fail_next` answers that many requests with `fail_status`, `slow` delays
the answer after storing (a timeout on the client side), `stall` delays storing (a
request in flight for that long; with `drop_stalled` it is then neither stored nor
answered: the batch never reached the database), `max_records` answers 413 to
bigger batches, `reject_seq` answers 400 to a batch holding that seq (naming its index, as
the ingest view names the first bad record), `reject_all_from` to one holding any seq from
that on, and `fail_after_reject` fails that many requests after the next such 400 (once).
Keep in sync with: the webapp ingest view (the same status codes).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from translators.records import TcpStateChange, decode_batch

TOKEN = "stub-token-5f1c0d"


class IngestStub:
    def __init__(self) -> None:
        self.port = 0
        self.lock = threading.Lock()
        self.received: list[int] = []  # every seq in arrival order, duplicates included
        self.stored: list[int] = []  # first arrivals only (what an idempotent server keeps)
        self._seen: set[int] = set()
        self.requests = 0
        self.fail_next = 0
        self.fail_status = 500
        self.slow = 0.0
        self.stall = 0.0
        self.drop_stalled = False
        self.max_records: int | None = None
        self.reject_seq: int | None = None
        self.reject_all_from: int | None = None
        self.fail_after_reject = 0
        self.refused = 0  # 400 answers given
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                stub.handle(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def stop(self) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        self._server = None

    def answer(
        self, h: BaseHTTPRequestHandler, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            h.send_header(name, value)
        h.end_headers()
        h.wfile.write(data)

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length", "0")))
        with self.lock:
            self.requests += 1
            failing = self.fail_next > 0
            self.fail_next -= failing
        if h.path != "/api/ingest" or h.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.answer(h, 401, {"error": "bad ingest token"})
        if failing:
            return self.answer(h, self.fail_status, {"error": "try later"}, {"Retry-After": "0"})
        records = decode_batch(body, "msgpack")
        if self.stall:
            time.sleep(self.stall)
            if self.drop_stalled:
                return None
        if self.max_records is not None and len(records) > self.max_records:
            return self.answer(h, 413, {"error": "batch too large"})
        seqs = [r.seq for r in records]
        from_on = self.reject_all_from
        bad = [i for i, s in enumerate(seqs) if s == self.reject_seq or (from_on is not None and s >= from_on)]
        if bad:
            index = bad[0]
            with self.lock:
                self.fail_next, self.fail_after_reject = self.fail_next + self.fail_after_reject, 0
                self.refused += 1
            return self.answer(
                h, 400, {"error": f"record {index}: seq: refused by the stub", "index": index, "field": "seq"}
            )
        with self.lock:
            self.received.extend(seqs)
            fresh = [s for s in seqs if s not in self._seen]
            self._seen.update(fresh)
            self.stored.extend(fresh)
        if self.slow:
            time.sleep(self.slow)
        self.answer(h, 200, {"stored": len(fresh), "duplicates": len(seqs) - len(fresh)})


def make_records(start: int, count: int, host: str = "stub-host") -> list[TcpStateChange]:
    """`count` real records with consecutive seq numbers from `start`."""
    return [
        TcpStateChange(
            host_id=host,
            boot_id="boot-1",
            seq=seq,
            ts_ns=seq * 1000,
            ts_wall=1_700_000_000.0 + seq / 1000,
            provider="tcp",
            probe="state-change",
            src="127.0.0.1",
            sport=40000 + seq % 1000,
            dst="127.0.0.1",
            dport=80,
            prev_state="SYN_SENT",
            state="ESTABLISHED",
        )
        for seq in range(start, start + count)
    ]
