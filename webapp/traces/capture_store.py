"""Imported captures into the local database: what ``nettrail analyze --store`` and the
browser's upload write.

``store_records(records, host_name)`` writes records through the ingest endpoint's own
code path (webapp.traces.store.store_batch + push), so the Connection rows and live
pushes are the same as for a collector. ``store_passing`` stores a stream in chunks as
it passes on to its reader (the SIFTR import prints while it stores). Both raise
``timestamps.ImpossibleTime`` at the first record with an impossible time (before 2000,
over a day ahead), as ingest answers 400, once the records before it are stored (the
upload's transaction then rolls them back).

Django must be set up by the caller (the CLI does it lazily, the webapp at start).
Keep in sync with: webapp/traces/ingest.py (same storage steps), webapp/api/upload.py,
nettrail/commands/analyze_store.py (the flags), docs/collector-sinks.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.db import transaction

from translators.records import Record
from webapp.traces import push
from webapp.traces.models import Host
from webapp.traces.store import store_batch
from webapp.traces.timestamps import ImpossibleTime, checked_times

STORE_CHUNK = 5000  # records per transaction: bounded memory, one fsync per chunk


@dataclass
class StoreTotals:
    stored: int = 0
    duplicates: int = 0


def store_records(records: Iterable[Record], host_name: str) -> StoreTotals:
    """Store records of host `host_name` as ingest does (atomic per chunk, idempotent, pushed live)."""
    Host.objects.get_or_create(name=host_name)
    totals = StoreTotals()
    chunk: list[Record] = []
    try:
        for rec in checked_times(records):  # a packet from 1970 or 3000: ImpossibleTime names it
            if rec.host_id != host_name:
                raise ValueError(f"record seq {rec.seq}: host_id {rec.host_id!r} is not {host_name!r}")
            chunk.append(rec)
            if len(chunk) >= STORE_CHUNK:
                _store_chunk(chunk, totals)
                chunk = []
    except ImpossibleTime:
        if chunk:  # the records before it, as the SIFTR import stores those it printed
            _store_chunk(chunk, totals)
        raise
    if chunk:
        _store_chunk(chunk, totals)
    return totals


def _store_chunk(chunk: list[Record], totals: StoreTotals) -> None:
    result = store_batch(chunk)
    totals.stored += result.stored
    totals.duplicates += result.duplicates
    # Inside a caller's transaction (the upload page) browsers hear of the records only
    # once they are committed; otherwise on_commit runs at once.
    transaction.on_commit(lambda: push.push(result.new))


def store_passing(records: Iterator[Record], host_id: str, totals: StoreTotals) -> Iterator[Record]:
    """Yield every record as it comes and store them in atomic chunks (not pushed live:
    the SIFTR import's records have no live view); ``totals.stored`` counts them."""
    Host.objects.get_or_create(name=host_id)
    chunk: list[Record] = []
    try:
        for rec in checked_times(records):
            chunk.append(rec)
            yield rec
            if len(chunk) >= STORE_CHUNK:
                totals.stored += store_batch(chunk).stored
                chunk = []
    except ImpossibleTime:
        if chunk:  # the records before it, already passed on
            totals.stored += store_batch(chunk).stored
        raise
    if chunk:
        totals.stored += store_batch(chunk).stored
