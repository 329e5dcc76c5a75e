"""Values no record may carry, refused at ingest (400) before anything is stored.

A value the record types accept can still break what reads it back: an infinite
float was stored by SQLite and then written out as ``Infinity`` (not JSON) by every
API listing it; an integer beyond 64 bits or a NUL character fails in PostgreSQL;
a megabyte-long string bloats every page showing it. ``first_bad_value`` finds the
first such value (record index and field) in a decoded batch: a float that is not
finite, an integer outside the signed 64-bit columns, a string with NUL or longer
than MAX_TEXT characters, at the top level or inside a list, dict or struct field
(stored as JSON). Runs once per ingest batch: per kind, only the fields of a type
that can go wrong are read, with one C-level pass (``astuple``) per record.
Keep in sync with webapp/traces/schema.py (column types) and docs/webapp.md (ingest 400).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import msgspec

from translators.records import Record, describe
from webapp.traces.schema import is_json
from webapp.traces.store import INT64, UnstorableRecord

MAX_TEXT = 16 * 1024  # characters in one string value: far above any name, message or path


def first_bad_value(records: Sequence[Record]) -> UnstorableRecord | None:
    astuple = msgspec.structs.astuple
    for index, rec in enumerate(records):
        floats, ints, texts, nested = _fields(type(rec))
        values = astuple(rec)
        for i in floats:
            value = values[i]
            if value is not None and not math.isfinite(value):
                return _bad(index, rec, i, f"{value} is not a finite number")
        for i in ints:
            value = values[i]
            if value is not None and not INT64[0] <= value <= INT64[1]:
                return _bad(index, rec, i, f"{value} does not fit a signed 64-bit column")
        for i in texts:
            value = values[i]
            if value is not None:
                why = _text_refusal(value)
                if why is not None:
                    return _bad(index, rec, i, why)
        for i in nested:
            value = values[i]
            if value:
                why = _nested_refusal(value)
                if why is not None:
                    return _bad(index, rec, i, why)
    return None


_FIELDS: dict[type[Record], tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {}


def _fields(cls: type[Record]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Positions (in astuple order) of the float, int, str and JSON fields of a record type."""
    found = _FIELDS.get(cls)
    if found is None:
        position = {name: i for i, name in enumerate(cls.__struct_fields__)}
        groups: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
        for desc in describe(cls):
            if is_json(desc):
                groups[3].append(position[desc.name])
            elif desc.type is float:
                groups[0].append(position[desc.name])
            elif desc.type is int:
                groups[1].append(position[desc.name])
            elif desc.type is str:
                groups[2].append(position[desc.name])
        found = _FIELDS[cls] = (tuple(groups[0]), tuple(groups[1]), tuple(groups[2]), tuple(groups[3]))
    return found


def _text_refusal(value: str) -> str | None:
    if "\x00" in value:
        return "text cannot hold NUL characters"
    if len(value) > MAX_TEXT:
        return f"text longer than {MAX_TEXT} characters"
    return None


def _nested_refusal(value: Any) -> str | None:
    """The first bad value inside a JSON-stored field (lists, dicts, structs), depth-first."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, bool) or item is None:
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                return f"{item} is not a finite number"
        elif isinstance(item, int):
            if not INT64[0] <= item <= INT64[1]:
                return f"{item} does not fit a signed 64-bit integer"
        elif isinstance(item, str):
            why = _text_refusal(item)
            if why is not None:
                return why
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, msgspec.Struct):
            stack.extend(msgspec.structs.astuple(item))
    return None


def _bad(index: int, rec: Record, position: int, why: str) -> UnstorableRecord:
    field = type(rec).__struct_fields__[position]
    return UnstorableRecord(index, field, why)
