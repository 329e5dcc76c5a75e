"""Retention: keep at most NETTRAIL_RETENTION_DAYS days and NETTRAIL_RETENTION_ROWS rows per table.

Rows go oldest first (lowest id, i.e. earliest stored) in batches of
NETTRAIL_TRIM_BATCH, each in its own short transaction, so ingest waits at most
one small delete for the write lock. Run by ``manage.py trim`` and by the trimmer
thread of the server process (``start_trimmer``, started by webapp/serve.py).
On PostgreSQL the age limit first drops whole day partitions (partitions.py).
Keep in sync with settings.py (the NETTRAIL_RETENTION_* names) and docs/webapp.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from django.conf import settings
from django.db import close_old_connections, connection, models, transaction

from webapp.traces import drop_summary, partitions, recency
from webapp.traces.models import KIND_MODELS, Connection, Trimmed

log = logging.getLogger(__name__)
PAUSE_BETWEEN_BATCHES = 0.01  # seconds: lets a waiting ingest take the write lock


@dataclass(frozen=True)
class Policy:
    days: int  # 0: no age limit
    rows: int  # 0: no row limit
    batch: int

    @classmethod
    def from_settings(cls) -> Policy:
        return cls(settings.NETTRAIL_RETENTION_DAYS, settings.NETTRAIL_RETENTION_ROWS, settings.NETTRAIL_TRIM_BATCH)


def trimmed_models() -> Iterable[tuple[type[models.Model], str]]:
    """Each table with its wall-clock column."""
    for model in KIND_MODELS.values():
        yield model, "ts_wall"
    yield Connection, "last_seen"


def trim(policy: Policy, now: float | None = None) -> dict[str, int]:
    """Delete what the policy no longer keeps; returns rows deleted per table. Each
    table's count and the newest time deleted are kept in Trimmed, for the pages."""
    now = time.time() if now is None else now
    cutoff = now - policy.days * 86400
    # PostgreSQL: whole days older than the cutoff go as partitions (partitions.py).
    dropped = partitions.drop_before(cutoff) if policy.days else {}
    deleted: dict[str, int] = {}
    for model, time_column in trimmed_models():
        table = model._meta.db_table
        count = dropped.get(table, 0)
        newest = cutoff if count else None
        if policy.days:
            n, _ = _trim_age(model, time_column, cutoff, policy.batch)
            count, newest = count + n, cutoff if n else newest
        if policy.rows:
            n, last = _trim_rows(model, time_column, policy.rows, policy.batch)
            count, newest = count + n, _later(newest, last)
        if count:
            deleted[table] = count
            _note(table, count, newest, now)
    return deleted


def _later(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def _note(table: str, count: int, newest: float | None, now: float) -> None:
    """Add to the table's Trimmed row (made on its first trim)."""
    with transaction.atomic():
        row, _ = Trimmed.objects.select_for_update().get_or_create(table=table)
        row.rows += count
        row.newest = _later(row.newest, newest)
        row.updated = now
        row.save()


def _trim_age(model: type[models.Model], time_column: str, cutoff: float, batch: int) -> tuple[int, float | None]:
    older = model.objects.filter(**{f"{time_column}__lt": cutoff}).order_by("id")
    if time_column == "last_seen":
        older = recency.at_most(older, cutoff)  # PostgreSQL: through last_seen's bucket index
    return _delete_batches(model, time_column, older, batch)


def _trim_rows(model: type[models.Model], time_column: str, keep: int, batch: int) -> tuple[int, float | None]:
    total = model.objects.count()
    if total <= keep:
        return 0, None
    # The id of the newest row to drop: everything at or below it goes.
    last = model.objects.order_by("id").values_list("id", flat=True)[total - keep - 1]
    return _delete_batches(model, time_column, model.objects.filter(id__lte=last).order_by("id"), batch)


def _delete_batches(
    model: type[models.Model], time_column: str, query: models.QuerySet[models.Model], batch: int
) -> tuple[int, float | None]:
    """-> (rows deleted, the newest of their times)."""
    deleted, newest = 0, None
    while True:
        with transaction.atomic():
            rows = list(query.values_list("id", time_column)[:batch])
            if rows and model is KIND_MODELS["skb_drop"]:  # the buffers page's counts (drop_summary.py)
                gone = model.objects.filter(id__in=[r[0] for r in rows]).values_list(*drop_summary.FIELDS)
                drop_summary.forget_rows(gone)
            if rows:
                model.objects.filter(id__in=[r[0] for r in rows]).delete()
                newest = _later(newest, max(r[1] for r in rows))
        deleted += len(rows)
        if len(rows) < batch:
            return deleted, newest
        time.sleep(PAUSE_BETWEEN_BATCHES)


def start_trimmer(interval: float, policy: Policy | None = None) -> threading.Event:
    """Trim every `interval` seconds in a daemon thread; set the returned event to stop it."""
    stop = threading.Event()
    thread = threading.Thread(target=_trim_loop, args=(interval, policy, stop), name="nettrail-trim", daemon=True)
    thread.start()
    return stop


def _trim_loop(interval: float, policy: Policy | None, stop: threading.Event) -> None:
    _ensure_partitions()
    while not stop.wait(interval):
        _ensure_partitions()
        try:
            deleted = trim(policy or Policy.from_settings())
            if deleted:
                log.info("retention trim deleted %s", deleted)
        except Exception:  # keep trimming later: a locked database must not end the thread
            log.exception("retention trim failed")
        finally:
            close_old_connections()
            connection.close()


def _ensure_partitions() -> None:
    """PostgreSQL: today's and the next days' partitions exist before any record needs them."""
    try:
        with transaction.atomic():
            partitions.ensure_ahead()
    except Exception:  # the COPY path still creates a missing day itself
        log.exception("creating partitions ahead failed")
    finally:
        close_old_connections()
