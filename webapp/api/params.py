"""Declared query parameters of the read API: parsed strictly, and described in the OpenAPI schema.

A view lists its parameters once (``Param``); the same list parses the request
(``parse``: unknown or malformed parameters raise ``BadParam`` with a message for a
400) and feeds webapp/api/openapi.py. Keep in sync with docs/api.md.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

TRUE_WORDS = ("1", "true", "yes")
FALSE_WORDS = ("0", "false", "no")


class BadParam(ValueError):
    """A query parameter the API cannot use; the message names it."""


@dataclass(frozen=True)
class Param:
    """One query parameter: `type` is int, float, str, bool, ip, enum or cursor."""

    name: str
    type: str
    description: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    default: Any = None

    def convert(self, raw: str) -> Any:
        value: Any = _CONVERTERS[self.type](self, raw)
        if self.minimum is not None and value < self.minimum:
            raise BadParam(f"{self.name} must be at least {self.minimum:g}")
        if self.maximum is not None and value > self.maximum:
            raise BadParam(f"{self.name} must be at most {self.maximum:g}")
        return value

    def openapi(self) -> dict[str, Any]:
        schema: dict[str, Any] = dict(_OPENAPI_TYPES[self.type])
        if self.choices:
            schema["enum"] = list(self.choices)
        if self.minimum is not None:
            schema["minimum"] = self.minimum
        if self.maximum is not None:
            schema["maximum"] = self.maximum
        if self.default is not None:
            schema["default"] = self.default
        return {"name": self.name, "in": "query", "required": False, "description": self.description, "schema": schema}


def parse(params: Sequence[Param], query: Mapping[str, str]) -> dict[str, Any]:
    """Values of the declared parameters (default when absent); BadParam on anything else."""
    known = {p.name: p for p in params}
    for name in query:
        if name not in known:
            raise BadParam(f"unknown parameter {name!r} (allowed: {', '.join(known) or 'none'})")
    out: dict[str, Any] = {}
    for p in params:
        raw = query.get(p.name)
        out[p.name] = p.default if raw is None or raw == "" else p.convert(raw)
    return out


INT64 = (-(2**63), 2**63 - 1)  # the database's integer columns


def _int(p: Param, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise BadParam(f"{p.name} must be a whole number, got {raw[:40]!r}") from None
    if not INT64[0] <= value <= INT64[1]:
        raise BadParam(f"{p.name} is out of range (a signed 64-bit number)")
    return value


def _float(p: Param, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise BadParam(f"{p.name} must be a number, got {raw[:40]!r}") from None
    if not math.isfinite(value):
        raise BadParam(f"{p.name} must be a finite number")
    return value


def _str(p: Param, raw: str) -> str:
    if len(raw) > 255:
        raise BadParam(f"{p.name} is longer than 255 characters")
    return raw


def _bool(p: Param, raw: str) -> bool:
    low = raw.lower()
    if low in TRUE_WORDS:
        return True
    if low in FALSE_WORDS:
        return False
    raise BadParam(f"{p.name} must be true or false, got {raw[:40]!r}")


def _ip(p: Param, raw: str) -> str:
    try:
        return ipaddress.ip_address(raw).compressed  # the form the translators store
    except ValueError:
        raise BadParam(f"{p.name} must be an IPv4 or IPv6 address, got {raw[:60]!r}") from None


def _enum(p: Param, raw: str) -> str:
    assert p.choices is not None
    if raw not in p.choices:
        raise BadParam(f"{p.name} must be one of {', '.join(p.choices)}, got {raw[:40]!r}")
    return raw


def _cursor(p: Param, raw: str) -> list[Any]:
    return decode_cursor(raw, p.name)


_CONVERTERS = {
    "int": _int,
    "float": _float,
    "str": _str,
    "bool": _bool,
    "ip": _ip,
    "enum": _enum,
    "cursor": _cursor,
}
_OPENAPI_TYPES: dict[str, dict[str, Any]] = {
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "str": {"type": "string"},
    "bool": {"type": "boolean"},
    "ip": {"type": "string", "format": "ip-address"},
    "enum": {"type": "string"},
    "cursor": {"type": "string", "description": "opaque; the `next` value of the previous page"},
}


# --- cursors: opaque to clients, a JSON list of the sort key of the last row ---


def encode_cursor(key: Sequence[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key), separators=(",", ":")).encode()).decode().rstrip("=")


def decode_cursor(raw: str, name: str = "cursor") -> list[Any]:
    try:
        value = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (binascii.Error, ValueError):
        raise BadParam(f"{name} is not a cursor this API gave out") from None
    if not isinstance(value, list) or not all(isinstance(v, int | float | str) for v in value):
        raise BadParam(f"{name} is not a cursor this API gave out")
    return value
