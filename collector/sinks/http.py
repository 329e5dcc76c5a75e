"""HTTP sink: ships record batches to the webapp's ingest endpoint, spooling what it cannot send.

`write()` only appends to an in-memory list (beyond `max_pending` records, held up
by a slow request, the oldest go to the spool); a background thread cuts batches
(`batch_size` records or `flush_interval` seconds), encodes each as one MessagePack
array and POSTs it to ``<server>/api/ingest`` with the host's bearer token,
over HTTPS (a private CA with `ca_file`) or plain HTTP on loopback only unless
`insecure` (collector/sinks/http_transport.py), or over the webapp's Unix socket
(``unix:PATH``), after checking that the process holding it runs as `server_user`
(collector/sinks/unix_peer.py: no token goes to whoever took a port or a path).
The spool directory must be one only root or this user can change
(collector/private_dir.py): a root collector writes and deletes nowhere else.

What happens to a batch, by answer (the ingest contract in docs/api.md):
- 200: delivered. Its ``tracing`` member (what the dashboard asks this host to trace)
  is kept in `tracing` for `nettrail collect --providers-from-server`.
- no answer, timeout, 5xx, 408, 429: the batch goes to the on-disk spool
  (collector/spool.py) and so does every later batch until the spool is replayed,
  oldest first, after a back-off; a spooled batch is deleted only after a 200.
- 413: the batch is split in two and each half sent again (a single record too large
  is rejected as below).
- 400 naming one record (``index``, a value the database refuses): that record alone is
  written to ``<spool>/rejected/`` and the rest of the batch is sent again, so one bad
  value costs one record, not its batch (at most MAX_RECORD_REFUSALS a batch; then the
  remainder is rejected whole, as below). A record refused again after a replay is
  recognised by its bytes in rejected/ and counted once.
- any other 4xx: logged with the server's error and written to ``<spool>/rejected/``,
  never silently dropped; its records are counted in ``refused_records`` (the
  collector reports them as a LossReport, event_type "rejected": not in the database).
The spool outlives the process: a new sink on the same directory replays it first.
The server is idempotent on (host, boot, seq), so a batch replayed after a lost 200
is stored once. What a sink holds in memory is kept in a ledger beside the spool
(collector/sinks/held.py): after a SIGKILL the next sink spools the batch that was in
flight again and counts the records that were pending in ``killed_records``.

Keep in sync with: the ingest view in webapp/ (status codes), collector/spool.py and
docs/collector-sinks.md.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import requests

from collector.bpf import keeper
from collector.sinks import held
from collector.sinks.http_transport import check_server_url
from collector.sinks.unix_peer import URL_BASE, UnixPeerAdapter
from collector.sinks.unix_url import server_uid, socket_path
from collector.spool import DEFAULT_MAX_BYTES, Spool, SpoolError

log = logging.getLogger("nettrail.sink.http")

INGEST_PATH = "/api/ingest"
DEFAULT_BATCH_SIZE = 1000
DEFAULT_FLUSH_INTERVAL = 0.5
DEFAULT_TIMEOUT = 10.0
DEFAULT_CLOSE_TIMEOUT = 5.0
DEFAULT_MAX_PENDING = 100_000  # records held in memory while a request is in flight
RETRYABLE = frozenset({408, 429})
MAX_RECORD_REFUSALS = 64  # single records refused per batch before the rest is refused whole
# A port on this machine is anyone's once its server stops: the webapp's Unix socket is not.
PORT_HOLDER_WARNING = (
    "--server %s: plain HTTP to a port: whichever local user holds that port while the webapp is down "
    "receives the host's token; on the webapp's machine ship to unix:SOCKET --server-user USER instead"
)


class Outcome(enum.Enum):
    SENT = "sent"
    RETRY = "retry"  # keep it and try again later
    REJECTED = "rejected"  # moved to rejected/


@dataclass
class SinkStats:
    """Counters for the collector's self-health view (monotonic since the sink started)."""

    sent_batches: int = 0
    sent_records: int = 0
    duplicates: int = 0  # records the server already had (replays after a lost answer)
    spooled_batches: int = 0
    replayed_batches: int = 0
    split_batches: int = 0
    rejected_batches: int = 0
    rejected_records: int = 0
    unspoolable_records: int = 0  # a batch larger than the whole spool while the server was down
    rejected_dropped_records: int = 0  # rejected batches deleted to keep rejected/ within the spool bound
    refused_single_records: int = 0  # records refused alone (400 naming them), the rest of their batch sent


_encoder = msgspec.msgpack.Encoder()
_raw_list = msgspec.msgpack.Decoder(list[msgspec.Raw])


class HttpSink:
    """Non-blocking record sink for ``POST /api/ingest`` with a durable spool."""

    def __init__(
        self,
        server_url: str,
        token: str,
        spool_dir: str | Path,
        max_spool_bytes: int = DEFAULT_MAX_BYTES,
        batch_size: int = DEFAULT_BATCH_SIZE,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        retry_interval: float = 1.0,
        max_retry_interval: float = 30.0,
        max_pending: int = DEFAULT_MAX_PENDING,
        ca_file: str | Path | None = None,
        insecure: bool = False,
        server_user: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        # before any token is sent
        check_server_url(server_url, insecure=insecure, ca_file=ca_file, server_user=server_user)
        path = socket_path(server_url)
        uid = server_uid(server_user) if path is not None else None
        if path is None and server_url.startswith("http:") and os.geteuid() == 0:
            log.warning(PORT_HOLDER_WARNING, server_url)
        self.url = (URL_BASE if path is not None else server_url.rstrip("/")) + INGEST_PATH
        self.spool = Spool(spool_dir, max_spool_bytes)
        self.rejected_dir = Path(spool_dir) / "rejected"
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.timeout = timeout
        self.retry_interval = retry_interval
        self.max_retry_interval = max_retry_interval
        self.max_pending = max(max_pending, batch_size)
        self.stats = SinkStats()
        # (answered, value) of the newest 200's "tracing" member: what the dashboard asks
        # this host to trace (translators/tracing_request.py); (False, None) until one comes
        self.tracing: tuple[bool, Any] = (False, None)
        self._session = requests.Session()
        if path is not None and uid is not None:
            self._session.mount(URL_BASE, UnixPeerAdapter(path, uid))
        # Given on every request: a session-level `verify` loses to $REQUESTS_CA_BUNDLE.
        self._verify: str | bool = str(ca_file) if ca_file is not None else True
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/msgpack"}
        self._cond = threading.Condition()  # guards the pending list and counters (taken before _spool_lock)
        self._spool_lock = threading.Lock()  # the spool is shared by write() (overflow) and the sender
        self._pending: list[Any] = []
        self._oldest = 0.0  # monotonic time the oldest pending record arrived
        self._accepted = 0  # records given to write()
        self._handled = 0  # records sent, spooled, rejected or lost
        self._closing = False
        self._close_deadline = 0.0
        self._down = False  # the server failed; new batches go behind the spool
        self._backoff = retry_interval
        self._next_retry = 0.0
        self._in_flight = 0  # records of the batch being posted
        self._overflowing = 0  # records of write()'s chunk being spooled
        self.killed_records = self._claim_killed()
        # held in this sink's ledger until the report of them has been sent or spooled
        self._held = held.HeldLedger(self.spool.dir, carried=self.killed_records)
        self._report_due = False  # take_killed() gave the count out: the next write() holds its report
        self._report_mark: int | None = None  # once _handled reaches it, the report has left memory
        self._has_spool = not self.spool.empty()
        self._thread = threading.Thread(target=self._run, name="nettrail-http-sink", daemon=True)
        self._thread.start()

    # --- caller side ------------------------------------------------------------------

    def write(self, records: Iterable[Any]) -> None:
        """Queue records (Record structs or their dict form); never waits for the network."""
        batch = list(records)
        if not batch:
            return
        with self._cond:
            if self._closing:
                raise RuntimeError("write() after close()")
            if not self._pending:
                self._oldest = time.monotonic()
            self._pending.extend(batch)
            self._accepted += len(batch)
            if self._report_due:
                self._report_due, self._report_mark = False, self._accepted
            self._overflow()
            self._note_held()
            if len(self._pending) >= self.batch_size:
                self._cond.notify_all()

    def _overflow(self) -> None:
        """Memory bound while the sender is stuck in a slow request: the oldest pending
        records go to the spool (disk, not network), behind which later batches queue up."""
        while len(self._pending) > self.max_pending:
            chunk = self._pending[: self.batch_size]
            del self._pending[: self.batch_size]
            payload = _encoder.encode(chunk)
            # held while the spool's fsync runs: a kill then neither loses it nor counts it lost
            self._held.hold("overflow", payload)
            self._overflowing = len(chunk)
            self._note_held()
            self._to_spool(payload, len(chunk))
            self._handled += len(chunk)
            self._overflowing = 0

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every written record was sent or spooled; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._oldest = 0.0  # makes whatever is pending due now
            self._cond.notify_all()
            while self._handled < self._accepted:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = DEFAULT_CLOSE_TIMEOUT) -> None:
        """Send what is pending and keep replaying the spool for up to `timeout` seconds.

        What cannot be sent by then stays spooled for the next sink on this directory.
        """
        with self._cond:
            self._close_deadline = time.monotonic() + timeout
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        self._session.close()
        self._held.close()  # everything was sent or spooled

    @property
    def spooled(self) -> bool:
        """Batches are waiting in the spool (the server was unreachable)."""
        return self._has_spool

    @property
    def lost_records(self) -> int:
        """Records dropped for lack of spool space: report them as a LossReport (event_type "spool")."""
        return self.spool.lost_records + self.stats.unspoolable_records

    def take_killed(self) -> int:
        """Records a collector killed on this spool held in memory (lost), once: a LossReport,
        event_type "killed"; 0 afterwards."""
        with self._cond:
            killed, self.killed_records = self.killed_records, 0
            self._report_due = self._report_due or bool(killed)
        return killed

    @property
    def refused_records(self) -> int:
        """Records of batches the server refused (4xx): kept in rejected/ (the oldest deleted
        to stay within the spool bound), never stored. A LossReport, event_type "rejected";
        each refused record counts once, whether its file is kept or deleted later."""
        return self.stats.rejected_records

    # --- sender thread --------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closing and not self._due():
                    self._cond.wait(self._wait_time())
                # One batch at a time: what stays pending is newer than what is in flight,
                # so write()'s overflow to the spool keeps the order.
                chunk = self._pending[: self.batch_size]
                del self._pending[: self.batch_size]
                closing = self._closing and not self._pending
            if chunk:
                payload = _encoder.encode(chunk)
                self._held.hold("inflight", payload)  # the bytes before the count that says they are there
                with self._cond:
                    self._in_flight = len(chunk)
                    self._note_held()
                self._ship(payload, len(chunk))
                self._mark_handled(len(chunk))
            if closing:
                self._final_replay()
                return
            self._replay()

    def _due(self) -> bool:
        now = time.monotonic()
        if len(self._pending) >= self.batch_size:
            return True
        if self._pending and now - self._oldest >= self.flush_interval:
            return True
        return self._has_spool and now >= self._next_retry

    def _wait_time(self) -> float:
        now = time.monotonic()
        waits = [self.flush_interval]
        if self._pending:
            waits.append(self._oldest + self.flush_interval - now)
        if self._has_spool:
            waits.append(self._next_retry - now)
        return max(min(waits), 0.005)

    def _mark_handled(self, count: int) -> None:
        with self._cond:
            self._handled += count
            self._in_flight = 0
            self._note_held()
            self._cond.notify_all()

    def _note_held(self) -> None:
        """The ledger's counts (under _cond): pending = written, neither handled nor in a slot."""
        held_apart = self._in_flight + self._overflowing
        if self._report_mark is not None and self._handled >= self._report_mark:
            self._held.carried, self._report_mark = 0, None  # the killed records' report is out
        self._held.note(self._accepted - self._handled - held_apart, self._in_flight, self._overflowing)

    def _claim_killed(self) -> int:
        """Before the first send: what collectors killed on this spool held. Their slots (the
        batch in flight, a chunk being spooled) go back into the spool (replayed first, stored
        once); their pending records were lost, as were a slot's whose bytes do not decode to
        its count. Returns those lost."""
        lost = 0
        for found in held.claim(self.spool.dir):
            held_n = respooled = 0
            for count, payload in found.slots:
                held_n += count
                if count and payload is not None and _batch_size(payload) == count:
                    try:
                        self.spool.append(payload, count)
                        respooled += count
                    except (SpoolError, OSError) as exc:
                        log.error("cannot spool a batch a killed collector held: %s", exc)
            lost += found.pending + held_n - respooled + found.carried
            log.error(
                "the collector (pid %d) before this one was killed holding %d records in memory: %d lost, %d "
                "spooled again",
                found.pid, found.pending + held_n, found.pending + held_n - respooled, respooled,
            )  # fmt: skip
            if found.carried:
                log.error("it had not yet reported %d records lost before it: counted here", found.carried)
        for pid, unread in keeper.claim_unread(self.spool.dir):
            lost += unread
            log.error("the collector (pid %d) before this one was killed with %d events unread in its kernel ring: "
                      "lost", pid, unread)  # fmt: skip
        return lost

    def _ship(self, payload: bytes, count: int) -> None:
        if not self._down and not self._has_spool:
            if self._post(payload, count) is not Outcome.RETRY:
                return
            self._went_down()
        self._to_spool(payload, count)

    def _to_spool(self, payload: bytes, count: int) -> None:
        with self._spool_lock:
            try:
                self.spool.append(payload, count)
            except (SpoolError, OSError) as exc:
                self.stats.unspoolable_records += count
                log.error("cannot spool a batch of %d records, they are lost: %s", count, exc)
                return
            self.stats.spooled_batches += 1
            self._has_spool = True

    def _replay(self, force: bool = False) -> None:
        """Send spooled batches oldest first until the spool is empty or the server fails again."""
        if not self._has_spool or (not force and time.monotonic() < self._next_retry):
            return
        replayed = 0
        while True:
            with self._spool_lock:
                entry = self.spool.peek()
                if entry is None:
                    self._has_spool = False  # under the lock: an overflow append cannot slip in between
                    break
            if self._post(entry.payload, entry.records) is Outcome.RETRY:
                self._went_down()
                return
            with self._spool_lock:
                self.spool.ack(entry)
            replayed += 1
            self.stats.replayed_batches += 1
        if self._down or replayed:
            log.warning("ingest server reachable again: replayed %d spooled batches", replayed)
        self._down = False
        self._backoff = self.retry_interval

    def _final_replay(self) -> None:
        """On close: replay with the usual back-off until the spool is empty or the deadline passes."""
        first = True
        while self._has_spool:
            now = time.monotonic()
            if now >= self._close_deadline:
                log.warning("closing with batches still spooled in %s (sent on the next start)", self.spool.dir)
                return
            if not first and now < self._next_retry:
                time.sleep(min(self._next_retry, self._close_deadline) - now)
                continue
            self._replay(force=True)
            first = False

    def _went_down(self) -> None:
        self._down = True
        self._next_retry = time.monotonic() + self._backoff
        self._backoff = min(self._backoff * 2, self.max_retry_interval)

    # --- one request --------------------------------------------------------------------------

    def _post(self, payload: bytes, count: int, refusals: int = 0) -> Outcome:
        try:
            answer = self._session.post(
                self.url, data=payload, headers=self._headers, timeout=self.timeout, verify=self._verify
            )
        except requests.exceptions.SSLError as exc:  # a certificate problem: say which, it will not fix itself
            if not self._down:
                log.error("TLS with the ingest server failed (%s): spooling to %s", exc, self.spool.dir)
            return Outcome.RETRY
        except requests.RequestException as exc:
            if not self._down:
                log.warning("ingest server unreachable (%s): spooling to %s", type(exc).__name__, self.spool.dir)
            return Outcome.RETRY
        status = answer.status_code
        if status == 200:
            self._sent(answer, count)
            return Outcome.SENT
        if status >= 500 or status in RETRYABLE:
            if not self._down:
                log.warning("ingest server answered %d (%s): spooling", status, _error_of(answer))
            self._honour_retry_after(answer)
            return Outcome.RETRY
        if status == 413 and count > 1:
            return self._split(payload)
        index = _refused_index(answer, count)
        if index is not None and count > 1 and refusals < MAX_RECORD_REFUSALS:
            return self._refuse_one(payload, index, _error_of(answer), refusals)
        self._reject(payload, count, status, _error_of(answer))
        return Outcome.REJECTED

    def _sent(self, answer: requests.Response, count: int) -> None:
        self.stats.sent_batches += 1
        self.stats.sent_records += count
        try:
            body = answer.json()
            self.stats.duplicates += int(body.get("duplicates", 0))
            if "tracing" in body:
                self.tracing = (True, body["tracing"])  # one assignment: read from the collector's thread
        except (ValueError, AttributeError, TypeError):
            pass  # a 200 without the usual body still means stored

    def _split(self, payload: bytes) -> Outcome:
        """413: send each half on its own; the server dedupes halves repeated after a RETRY."""
        self.stats.split_batches += 1
        items = _raw_list.decode(payload)
        middle = len(items) // 2
        for half in (items[:middle], items[middle:]):
            if self._post(_encoder.encode(half), len(half)) is Outcome.RETRY:
                return Outcome.RETRY
        return Outcome.SENT

    def _refuse_one(self, payload: bytes, index: int, error: str, refusals: int) -> Outcome:
        """400 naming record `index`: it alone goes to rejected/, the others are sent again.
        The server names the first record its check refused, so those before it passed that
        check; after MAX_RECORD_REFUSALS the records after it are rejected whole instead of
        tried again (and a 400 for one before it then rejects the rest whole).
        A RETRY on the way spools the whole batch; its replay refuses the same record again,
        which _reject recognises by its bytes and does not count twice."""
        items = _raw_list.decode(payload)
        if self._reject(_encoder.encode([items[index]]), 1, 400, error, once=True):
            self.stats.refused_single_records += 1
        good, unknown = items[:index], items[index + 1 :]
        if unknown and refusals + 1 >= MAX_RECORD_REFUSALS:
            why = f"not tried: {MAX_RECORD_REFUSALS} records of their batch were refused one by one (last: {error})"
            self._reject(_encoder.encode(unknown), len(unknown), 400, why)
            unknown = []
        rest = good + unknown
        if not rest:
            return Outcome.REJECTED
        return self._post(_encoder.encode(rest), len(rest), refusals + 1)

    def _honour_retry_after(self, answer: requests.Response) -> None:
        try:
            wait = float(answer.headers.get("Retry-After", ""))
        except ValueError:
            return
        self._backoff = min(max(wait, self._backoff), self.max_retry_interval)

    def _reject(self, payload: bytes, count: int, status: int, error: str, once: bool = False) -> bool:
        """Keep a refused batch in rejected/ and count its records. With `once`, a payload
        already kept there (the same record refused again after a replay) is not counted again."""
        digest = hashlib.blake2b(payload, digest_size=8).hexdigest() if once else ""
        if once and self.rejected_dir.is_dir() and any(self.rejected_dir.glob(f"*-{digest}.msgpack")):
            return False
        self.stats.rejected_batches += 1
        self.stats.rejected_records += count
        self.rejected_dir.mkdir(mode=0o700, exist_ok=True)  # in the spool, which only we can change
        self._bound_rejected(len(payload))
        stem = f"{time.time_ns():020d}-{status}"  # names sort by age, across restarts too
        if once:
            stem += f"-{digest}"
        (self.rejected_dir / f"{stem}.msgpack").write_bytes(payload)
        (self.rejected_dir / f"{stem}.error").write_text(f"{status} {error}\n")
        log.error(
            "ingest server rejected a batch of %d records with %d: %s (kept in %s)",
            count,
            status,
            error,
            self.rejected_dir / f"{stem}.msgpack",
        )
        return True

    def _bound_rejected(self, incoming: int) -> None:
        """rejected/ may not outgrow the spool bound (a revoked token rejects every batch):
        the oldest rejected batches go first, counted as lost and logged."""
        kept = sorted(self.rejected_dir.glob("*.msgpack"))
        total = sum(p.stat().st_size for p in kept) + incoming
        while kept and total > self.spool.max_bytes:
            oldest = kept.pop(0)
            total -= oldest.stat().st_size
            records = len(_raw_list.decode(oldest.read_bytes()))
            self.stats.rejected_dropped_records += records
            oldest.unlink()
            oldest.with_suffix(".error").unlink(missing_ok=True)
            log.error(
                "rejected/ over %d bytes: deleted %s (%d records lost)", self.spool.max_bytes, oldest.name, records
            )


def _batch_size(payload: bytes) -> int | None:
    """Records in an encoded batch, or None if it does not decode (a torn write)."""
    try:
        return len(_raw_list.decode(payload))
    except msgspec.DecodeError:
        return None


def _refused_index(answer: requests.Response, count: int) -> int | None:
    """The one record a 400 names (the ingest view's `index`), or None."""
    if answer.status_code != 400:
        return None
    try:
        index = answer.json().get("index")
    except (ValueError, AttributeError):
        return None
    return index if isinstance(index, int) and not isinstance(index, bool) and 0 <= index < count else None


def _error_of(answer: requests.Response) -> str:
    """The server's `error` message, or the start of the body when it is not our JSON."""
    try:
        body = answer.json()
        if isinstance(body, dict) and "error" in body:
            return str(body["error"])
    except ValueError:
        pass
    return answer.text[:200] or answer.reason or "no message"
