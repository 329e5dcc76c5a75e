"""Values for people: ISO 8601 UTC times, humanised durations and byte counts (text style only).

The encoding styles (XML, JSON) and HTML keep the raw numbers; only the text style's
tables (xo/styles/table.py) and its emitted leaves pass through here. `no-humanize`
gives the raw numbers back, `--relative` turns times into offsets from the first time
shown. Keep in sync with: docs/output.md ("The text style").
"""

from __future__ import annotations

import datetime as dt
import math

# Byte units as `ls -lh` and iproute2 print them (powers of 1024), with the IEC names.
BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def iso_time(ts: float) -> str:
    """Epoch seconds -> '2025-11-29T08:00:00.123456Z' (UTC, microseconds, as RFC 3339 allows)."""
    stamp = dt.datetime.fromtimestamp(ts, tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def relative_time(ts: float, origin: float) -> str:
    """Seconds since `origin`, signed and to the microsecond, like tshark's `-t r`."""
    return f"{ts - origin:+.6f} s"


def duration(seconds: float) -> str:
    """A duration with a unit that fits it: 37 us, 12.3 ms, 9.62 s, 3 min 04 s, 2 h 03 min."""
    if not math.isfinite(seconds):
        return str(seconds)
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s == 0:
        return "0 s"
    if s < 1e-3:
        return f"{sign}{s * 1e6:.3g} us"
    if s < 1:
        return f"{sign}{s * 1e3:.3g} ms"
    if s < 60:
        return f"{sign}{s:.3g} s"
    whole = round(s)
    if whole < 3600:
        return f"{sign}{whole // 60} min {whole % 60:02d} s"
    if whole < 86400:
        return f"{sign}{whole // 3600} h {whole % 3600 // 60:02d} min"
    return f"{sign}{whole // 86400} d {whole % 86400 // 3600:02d} h"


def byte_count(n: float) -> str:
    """512 B, 1.5 KiB, 13 MiB: one decimal below 10 of a unit, none above."""
    value = float(n)
    unit = 0
    while abs(value) >= 1024 and unit < len(BYTE_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{int(n)} B"
    return f"{value:.1f} {BYTE_UNITS[unit]}" if abs(value) < 10 else f"{value:.0f} {BYTE_UNITS[unit]}"
