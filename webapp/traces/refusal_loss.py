"""A loss record for records the webapp accepted and then could not store.

Under scale-out (docs/scale-out.md) ingest answers 200 once a batch is on the Redis
stream, so the collector counts it delivered; a writer that then finds the batch
unstorable moves it to ``nettrail:ingest:refused``. Those records are lost to the
database, so the writer also stores a ``loss_report`` for the batch's host (probe
``loss``, hook ``writer/refused``, event_type ``refused``, ``lost`` = the batch's
record count): the Status page and rule H1 see it like a collector's own losses.
The report's (boot_id, seq) is derived from the stream entry id, so a refusal seen
twice (a redelivered entry) is stored once.
Used by webapp/bus/writer.py; listed in docs/collector.md "Where records can be lost".
"""

from __future__ import annotations

import logging
import time

from translators.records import LossReport
from webapp.traces import push
from webapp.traces.store import UnstorableRecord, store_batch

log = logging.getLogger(__name__)
BOOT_PREFIX = "webapp-writer-refused-"


def report_refused(host: str, entry_id: str, records: int) -> None:
    """Store (and push live) the loss report of a refused batch of `records` records of `host`."""
    now = time.time()
    report = LossReport(
        host_id=host, boot_id=BOOT_PREFIX + entry_id, seq=0, ts_ns=time.time_ns(), ts_wall=now,
        provider="nettrail", probe="loss", hook="writer/refused",
        event_type="refused", lost=records, lost_total=records,
    )  # fmt: skip
    try:
        push.push(store_batch([report]).new)
    except UnstorableRecord as exc:  # a host name the database cannot hold: the log is all there is
        log.error(
            "cannot store the loss report of refused entry %s (%d records of %r): %s", entry_id, records, host, exc
        )
