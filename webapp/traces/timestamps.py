"""Times no record may carry, refused before anything is stored (issue 33 item 6).

A finite but impossible time (``ts_wall`` 1e300 or -1e300, ``ts_ns`` -2^62) was stored:
such a row stayed at the top (or bottom) of every newest-first list and outside the
day-based retention for ever. A wall-clock field (seconds since the epoch) must lie
between 2000-01-01 UTC and a day ahead of the server's clock (a host whose clock is a
little off still passes); a kernel-clock field (nanoseconds: CLOCK_MONOTONIC since boot
for live data, since the epoch for capture files) between 0 and 100 years.

``first_impossible_time`` names the first such value of a batch (record index, field) for
``/api/ingest``'s 400; ``checked_times`` passes a stream on and raises at the first one,
for the capture and SIFTR imports (webapp/traces/capture_store.py), naming the frame of
a packet record. Keep the field lists in sync with translators/records*.py and
docs/webapp.md (ingest 400).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime

from translators.records import Alert, Connection, IpFlowCounters, Record
from webapp.traces.store import UnstorableRecord

WALL_MIN = 946_684_800.0  # 2000-01-01T00:00:00Z: nothing nettrail stores is older
AHEAD_S = 86_400.0  # a day ahead of the server's clock
KERNEL_NS_MAX = 100 * 36525 * 864 * 10**9  # 100 Julian years of nanoseconds (3.16e18)

# Wall-clock fields besides every record's ts_wall (seconds since the epoch, float);
# Connection.findings[i].ts too. Kernel-clock fields besides every record's ts_ns.
WALL_FIELDS: dict[type[Record], tuple[str, ...]] = {Connection: ("start", "end"), Alert: ("start", "end")}
KERNEL_FIELDS: dict[type[Record], tuple[str, ...]] = {IpFlowCounters: ("start_ts_ns", "end_ts_ns")}


class ImpossibleTime(UnstorableRecord):
    """A record whose time cannot be true; ``where`` names it in a file (its frame) or a batch."""

    def __init__(self, index: int, field_name: str, why: str, where: str) -> None:
        super().__init__(index, field_name, why)
        self.args = (f"{where}: {field_name}: {why}",)


def first_impossible_time(records: Sequence[Record], now: float | None = None) -> UnstorableRecord | None:
    """The first record (index, field) of a batch with an impossible time, or None."""
    latest = (time.time() if now is None else now) + AHEAD_S
    for index, rec in enumerate(records):
        found = impossible_time(rec, latest)
        if found is not None:
            return UnstorableRecord(index, *found)
    return None


def checked_times(records: Iterable[Record]) -> Iterator[Record]:
    """Pass `records` on; raise ImpossibleTime at the first with an impossible time."""
    for index, rec in enumerate(records):
        found = impossible_time(rec, time.time() + AHEAD_S)
        if found is not None:
            frame = getattr(rec, "frame", None)
            where = f"packet {frame}" if frame is not None else f"record {index} ({rec.kind}, seq {rec.seq})"
            raise ImpossibleTime(index, *found, where=where)
        yield rec


def impossible_time(rec: Record, latest: float) -> tuple[str, str] | None:
    """(field, why) of the record's first impossible time, or None; `latest`: the last plausible wall time."""
    why = _wall_refusal(rec.ts_wall, latest)
    if why is not None:
        return "ts_wall", why
    why = _kernel_refusal(rec.ts_ns)
    if why is not None:
        return "ts_ns", why
    for name in WALL_FIELDS.get(type(rec), ()):
        why = _wall_refusal(getattr(rec, name), latest)
        if why is not None:
            return name, why
    for name in KERNEL_FIELDS.get(type(rec), ()):
        why = _kernel_refusal(getattr(rec, name))
        if why is not None:
            return name, why
    if isinstance(rec, Connection):
        for i, finding in enumerate(rec.findings or ()):
            why = _wall_refusal(finding.ts, latest)
            if why is not None:
                return f"findings[{i}].ts", why
    return None


def _wall_refusal(value: float | None, latest: float) -> str | None:
    if value is None or WALL_MIN <= value <= latest:  # NaN fails both: refused below
        return None
    if value < WALL_MIN:
        return f"{value!r} s since the epoch is before 2000-01-01T00:00:00Z"
    if value > latest:
        return f"{value!r} s since the epoch is after {_iso(latest)}, a day ahead of the server's clock"
    return f"{value!r} is not a time"


def _kernel_refusal(value: int | None) -> str | None:
    if value is None or 0 <= value <= KERNEL_NS_MAX:
        return None
    if value < 0:
        return f"{value} ns is negative"
    return f"{value} ns is more than 100 years"


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
