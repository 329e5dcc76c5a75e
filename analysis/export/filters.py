"""What a report or export covers: hosts, one connection, a time range, record kinds.

Shared by `nettrail report` and the webapp's download endpoints, so both accept the
same spellings and refuse the same mistakes with the same words. Pure: no Django.
Keep in sync with: docs/reports.md (the accepted forms), nettrail/commands/report.py,
webapp/reports/views.py.
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from translators.records import BY_KIND

# Kinds that never belong to a connection: reported in the header / unattributed part.
CONNECTIONLESS = ("drop_count", "loss_report")
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class FilterError(ValueError):
    """A bad filter value: the CLI exits 2, the endpoints answer 400."""


@dataclass(frozen=True)
class ReportFilter:
    hosts: tuple[str, ...] = ()
    connection: str | None = None
    since: float | None = None
    until: float | None = None
    kinds: tuple[str, ...] = field(default_factory=lambda: tuple(BY_KIND))

    def connection_kinds(self) -> tuple[str, ...]:
        return tuple(k for k in self.kinds if k not in CONNECTIONLESS)


def parse_time(text: str, now: float | None = None) -> float:
    """Epoch seconds ('1700000000.5'), ISO-8601 ('2026-11-29T07:00:00Z'; naive = UTC) or
    an age ('15m', '2h', '1d': that long before now)."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    rel = _RELATIVE.match(text)
    if rel:
        return (now if now is not None else time.time()) - float(rel.group(1)) * _UNITS[rel.group(2)]
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise FilterError(f"bad time {text!r}: use epoch seconds, ISO-8601 or an age like 15m, 2h, 1d") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def parse_kinds(text: str | None) -> tuple[str, ...]:
    if not text:
        return tuple(BY_KIND)
    kinds = tuple(dict.fromkeys(k.strip().replace("-", "_") for k in text.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in BY_KIND]
    if unknown or not kinds:
        named = ", ".join(unknown) if unknown else repr(text)
        raise FilterError(f"unknown record kind {named}; known: {', '.join(BY_KIND)}")
    return kinds


def parse_connection(text: str | None) -> str | None:
    if not text:
        return None
    try:
        return str(uuid.UUID(text))
    except ValueError:
        raise FilterError(f"bad connection id {text!r}: expected a UUID") from None


def build_filter(
    hosts: str | None = None,
    connection: str | None = None,
    since: str | None = None,
    until: str | None = None,
    kinds: str | None = None,
    now: float | None = None,
) -> ReportFilter:
    """Parses every part; raises FilterError naming the first bad one."""
    start = parse_time(since, now) if since else None
    end = parse_time(until, now) if until else None
    if start is not None and end is not None and start > end:
        raise FilterError(f"inverted time range: since ({since}) is after until ({until})")
    host_list = tuple(dict.fromkeys(h.strip() for h in (hosts or "").split(",") if h.strip()))
    return ReportFilter(host_list, parse_connection(connection), start, end, parse_kinds(kinds))
