"""What every kernel-event translator shares: the envelope and the 4-tuple of a raw event.

A raw event is a dict of the fields of `struct nt_event` (kmod/nettrail.h, header +
one body) as plain Python values (collector/bpf/layout.py names them). Translators
are pure: raw event + KernelEnv in, records out; the collector assigns `seq`.
Keep in sync with: kmod/nettrail.h (nt_header, enum nt_ctx, nt_attribution) and the
envelope of translators/records.py (providers.md 0.1, 9.3).
"""

from __future__ import annotations

import collections
import copy
import functools
import ipaddress
import itertools
import os
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
import numpy as np

from translators.records import BY_KIND, LINUX_TCP_STATES, TCP_STATES, Record, connection_uuid, describe

R = TypeVar("R", bound=Record)
# Kernel records are built from typed values by this package's own code, so the
# per-field checks of Record.__post_init__ (most of the cost of a record) run only
# when asked: tests set VALIDATE, and every record is validated again at ingest.
VALIDATE = os.environ.get("NETTRAIL_VALIDATE_RECORDS", "") not in ("", "0")

Raw = Mapping[str, Any]


class WireRow(msgspec.Struct, tag_field="kind", gc=False):
    """Base of the unvalidated mirror of a record kind (wire_row_class): the same fields in
    the same order under the same tag, so it encodes to the Record's exact bytes, but built
    positionally in C with no __post_init__ (the batch translators' output). Reads like a
    wire dict (rec["field"], rec["kind"]); as_struct() gives the validated Record."""

    kind: typing.ClassVar[str]

    def __getitem__(self, name: str) -> Any:
        return getattr(self, name)


# A record as a Struct, as its wire dict ({"kind": ..., every field in Struct order}) or as
# a WireRow: the last two encode to the Struct's JSON/msgpack bytes without building it.
KernelRecord = Record | dict[str, Any] | WireRow
Translator = Callable[[Raw, "KernelEnv"], list[KernelRecord]]

AF_INET, AF_INET6 = 2, 10
CTX = {0: "unknown", 1: "task", 2: "softirq"}
_CTX_BY_VALUE = tuple(CTX.get(x, "unknown") for x in range(256))  # ctx is a u8: a list index per event
ATTRIBUTION = {1: "current", 2: "owner-map"}
CA_STATE_NAMES = ("Open", "Disorder", "CWR", "Recovery", "Loss")
FREEBSD_STATE_NUMBER = {name: i for i, name in enumerate(TCP_STATES)}


@dataclass
class KernelEnv:
    """Per-collector facts a translator needs; the caches only memoise pure functions."""

    host_id: str
    boot_id: str
    wall_offset: float  # CLOCK_REALTIME - CLOCK_MONOTONIC, seconds
    drop_reasons: Mapping[int, str] = field(default_factory=dict)
    rst_reasons: Mapping[int, str] = field(default_factory=dict)
    wire: bool = False  # build wire dicts (the collector's fast path) instead of Structs
    symbolize: Callable[[int], str | None] = field(default=lambda address: None, repr=False)  # kernel address -> name
    _uuids: dict[int, str] = field(default_factory=dict, repr=False)
    _addrs: dict[tuple[int, bytes], str | None] = field(default_factory=dict, repr=False)

    def conn_uuid(self, cookie: int) -> str | None:
        if not cookie:
            return None
        found = self._uuids.get(cookie)
        if found is None:
            if len(self._uuids) > 200_000:
                self._uuids.clear()
            found = self._uuids[cookie] = connection_uuid(self.host_id, self.boot_id, cookie)
        return found

    def address(self, family: int, raw: bytes) -> str | None:
        key = (family, raw)
        found = self._addrs.get(key, "")
        if found == "":
            if len(self._addrs) > 100_000:
                self._addrs.clear()
            found = self._addrs[key] = format_address(family, raw)
        return found

    def wall(self, ts_ns: int) -> float:
        return round(ts_ns / 1e9 + self.wall_offset, 6)


@functools.cache
def _template(cls: type[Record]) -> tuple[Record, dict[str, Any], tuple[tuple[str, Callable[[], Any]], ...]]:
    """A validated instance with placeholder required fields, its wire dict, and the default-factory fields."""
    values: dict[str, Any] = {}
    for f in describe(cls):
        if f.required:
            values[f.name] = f.choices[0] if f.choices else f.type()
    factories = tuple(
        (f.name, f.default_factory) for f in msgspec.structs.fields(cls) if f.default_factory is not msgspec.NODEFAULT
    )
    template = cls(**values)
    return template, msgspec.to_builtins(template), factories


@functools.cache
def wire_row_class(cls: type[Record]) -> type[WireRow]:
    """The WireRow mirror of a record kind (fields in the Struct's encoding order)."""
    tag = typing.cast(str, cls.__struct_config__.tag)
    fields = [(f.name, Any) for f in msgspec.structs.fields(cls)]
    row = msgspec.defstruct(f"{cls.__name__}Wire", fields, bases=(WireRow,), tag=tag, namespace={"kind": tag})
    return typing.cast(type[WireRow], row)


def make(cls: type[R], kwargs: Mapping[str, Any], env: KernelEnv) -> R | dict[str, Any]:
    """cls(**kwargs); as a wire dict when env.wire; __post_init__'s checks only if VALIDATE."""
    if VALIDATE:
        rec = cls(**kwargs)
        if env.wire:
            wire_form: dict[str, Any] = msgspec.to_builtins(rec)
            return wire_form
        return rec
    template, wire, factories = _template(cls)
    if env.wire:
        out = wire.copy()
        for name, factory in factories:
            out[name] = factory()
        out.update(kwargs)
        return out
    built = typing.cast(R, copy.copy(template))  # Struct.__copy__: no __init__, no checks
    for name, factory in factories:
        setattr(built, name, factory())
    for name, value in kwargs.items():
        setattr(built, name, value)
    return built


def wall_column(ts_ns: Any, offset: float) -> list[float]:
    """[round(t / 1e9 + offset, 6) for t in ts_ns] (KernelEnv.wall), the same floats, in numpy.

    t / 1e9 + offset are the same IEEE operations as Python's (ns below 2**53 convert
    exactly). round(x, 6) is the double nearest to k / 10**6, k the integer nearest to
    the exact x * 10**6, ties to even (CPython rounds the exact binary value). The
    product's exact rounding error comes from Dekker's two-product, so k is decided
    exactly; k / 1e6 is then correctly rounded, as strtod does. Values outside the
    range where this holds (negative, not finite, x * 10**6 >= 2**52) use round()."""
    x = ts_ns / 1e9 + offset
    p = x * 1e6
    err = _product_error(x, p)
    whole = np.floor(p)
    above_half = (p - whole - 0.5) + err  # sign exact: see the docstring
    k = whole + (above_half > 0) + ((above_half == 0) & (np.fmod(whole, 2) == 1))
    out: list[float] = (k / 1e6).tolist()
    odd = ~((x >= 0) & (p < 2.0**52))  # NaN compares false: odd too
    if odd.any():
        xs = x.tolist()
        for i in np.flatnonzero(odd).tolist():
            out[i] = round(xs[i], 6)
    return out


def _product_error(a: Any, p: Any) -> Any:
    """a * 1e6 - p exactly, p = fl(a * 1e6) (Dekker: Veltkamp split of both factors)."""
    c = 134217729.0 * a  # 2**27 + 1
    a_hi = c - (c - a)
    a_lo = a - a_hi
    b_hi, b_lo = 1e6, 0.0  # 1e6 has 20 significant bits: it is its own high half
    return ((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo


def event_columns(
    a: Any, env: KernelEnv, provider: str, probe: str | list[str], hook: str | list[str]
) -> dict[str, Any]:
    """The envelope fields that vary per event (time, CPU, context) or not at all."""
    return {
        "host_id": env.host_id,
        "boot_id": env.boot_id,
        "seq": 0,
        "ts_ns": a["ts_ns"].tolist(),
        "ts_wall": wall_column(a["ts_ns"], env.wall_offset),
        "provider": provider,
        "probe": probe,
        "hook": hook,
        "cpu": a["cpu"].tolist(),
        "ctx": list(map(_CTX_BY_VALUE.__getitem__, a["ctx"].tolist())),
    }


def envelope_columns(
    a: Any, env: KernelEnv, provider: str, probe: str | list[str], hook: str | list[str]
) -> dict[str, Any]:
    """envelope() for a whole numpy batch: a list per varying field, a scalar per constant one."""
    owners = [ATTRIBUTION.get(x) for x in a["attribution"].tolist()]
    family = a["family"].tolist()
    cookies = a["cookie"].tolist()

    def owned(name: str) -> list[Any]:
        return [v if how else None for v, how in zip(a[name].tolist(), owners, strict=True)]

    return {
        **event_columns(a, env, provider, probe, hook),
        "netns": [x or None for x in a["netns"].tolist()],
        "conn_uuid": [env.conn_uuid(c) for c in cookies],
        "sock_cookie": [c or None for c in cookies],
        "pid": owned("pid"),
        "tgid": owned("tgid"),
        "comm": [kernel_text(c) if how else None for c, how in zip(a["comm"].tolist(), owners, strict=True)],
        "uid": owned("uid"),
        "gid": owned("gid"),
        "cgroup_id": owned("cgroup_id"),
        "attribution": owners,
        "ip_ver": [4 if f == AF_INET else 6 if f == AF_INET6 else None for f in family],
        "src": [env.address(f, s) for f, s in zip(family, a["saddr"].tolist(), strict=True)],
        "sport": [p if f else None for p, f in zip(a["sport"].tolist(), family, strict=True)],
        "dst": [env.address(f, d) for f, d in zip(family, a["daddr"].tolist(), strict=True)],
        "dport": [p if f else None for p, f in zip(a["dport"].tolist(), family, strict=True)],
    }


# Envelope fields that only depend on the event's socket header (cookie, 4-tuple, owner,
# netns): the same for every event of a connection, so a batch computes them once per
# distinct header (connection_groups) instead of once per event.
CONN_FIELDS = (
    "netns", "conn_uuid", "sock_cookie", "pid", "tgid", "comm", "uid", "gid", "cgroup_id", "attribution",
    "ip_ver", "src", "sport", "dst", "dport",
)  # fmt: skip
_CONN_SOURCES = (
    "cookie", "family", "saddr", "daddr", "sport", "dport", "netns", "attribution",
    "pid", "tgid", "uid", "gid", "cgroup_id", "comm",
)  # fmt: skip
# One (grouped) batch: the group of each row, and per CONN_FIELDS name its value per group.
Groups = tuple[list[int], dict[str, list[Any]]]


def connection_groups(a: Any, env: KernelEnv) -> Groups:
    """Rows of a numpy batch grouped by the header fields CONN_FIELDS depend on (exact:
    a socket whose owner or port changes mid-batch is two groups)."""
    keys = np.empty(len(a), dtype=[(name, a.dtype.fields[name][0]) for name in _CONN_SOURCES])
    for name in _CONN_SOURCES:
        keys[name] = a[name]
    _, first, inverse = np.unique(keys.view(f"V{keys.dtype.itemsize}"), return_index=True, return_inverse=True)
    heads = envelope_columns(a[first], env, "", "", "")
    return inverse.reshape(-1).tolist(), {name: heads[name] for name in CONN_FIELDS}


def envelope_columns_grouped(
    a: Any, env: KernelEnv, provider: str, probe: str | list[str], hook: str | list[str]
) -> tuple[dict[str, Any], Groups]:
    """envelope_columns() split in two: the per-event columns and the per-connection groups
    (for rows_in_wire_order's `groups`); the same records, less work per event."""
    return event_columns(a, env, provider, probe, hook), connection_groups(a, env)


def row_by_row(a: Any, env: KernelEnv, translate: Translator) -> list[KernelRecord]:
    """A batch through the per-event translator (Structs, validation, or no batch form)."""
    names = a.dtype.names or ()
    return [rec for row in a.tolist() for rec in translate(dict(zip(names, row, strict=True)), env)]


def rows_in_wire_order(
    cls: type[Record], columns: Mapping[str, Any], n: int, groups: Groups | None = None
) -> list[KernelRecord]:
    """n records of cls from columns (a list per varying field, a scalar per constant one)
    as WireRows; fields not given keep the Struct's default. With `groups`
    (connection_groups), row i also takes the fields of group groups[0][i]. Same bytes
    as the Struct (field order and tag are the Struct's)."""
    _, wire, factories = _template(cls)
    made = dict(factories)
    group_of, per_group = groups if groups is not None else ([], {})
    sources: list[Any] = []
    for name in wire_row_class(cls).__struct_fields__:
        if name in per_group:  # per-connection: one value per group, spread over its rows
            sources.append(list(map(per_group[name].__getitem__, group_of)))
            continue
        value = columns.get(name, wire[name])
        if isinstance(value, list):
            sources.append(value)
        elif name in made and name not in columns:  # a default_factory field: fresh per record
            sources.append([made[name]() for _ in range(n)])
        else:
            sources.append(itertools.repeat(value, n))
    # one C call per record: the positional constructor, no dict, no __post_init__
    return list(map(wire_row_class(cls), *sources))


def as_struct(rec: KernelRecord) -> Record:
    """The Struct of a kernel record (wire dicts and WireRows are validated)."""
    if isinstance(rec, dict):
        fields = {k: v for k, v in rec.items() if k != "kind"}
        return BY_KIND[rec["kind"]](**fields)
    if isinstance(rec, WireRow):
        return BY_KIND[rec.kind](**msgspec.structs.asdict(rec))
    return rec


def number(records: list[KernelRecord], seq: int) -> int:
    """Give records consecutive seq from `seq`; returns the next one."""
    end = seq + len(records)
    if dict not in set(map(type, records)):  # Structs and WireRows: one C-level pass
        collections.deque(map(setattr, records, itertools.repeat("seq"), range(seq, end)), maxlen=0)
        return end
    for rec in records:
        if type(rec) is dict:
            rec["seq"] = seq
        else:
            rec.seq = seq  # type: ignore[union-attr]
        seq += 1
    return seq


def set_seq(rec: KernelRecord, seq: int) -> None:
    if isinstance(rec, dict):
        rec["seq"] = seq
    else:
        rec.seq = seq  # type: ignore[union-attr]  # every WireRow class has the Record's seq


def kernel_text(raw: bytes) -> str:
    """A fixed-size C string from the kernel: up to its first NUL. The bytes after it are
    whatever the buffer held before (ring slots are not zeroed), never part of the name."""
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def format_address(family: int, raw: bytes) -> str | None:
    """IPv4 dotted quad, IPv6 RFC 5952 (mapped addresses stay IPv6), None if unknown."""
    if family == AF_INET:
        return str(ipaddress.IPv4Address(raw[:4]))
    if family == AF_INET6:
        addr = ipaddress.IPv6Address(raw[:16])
        mapped = addr.ipv4_mapped
        # RFC 5952 section 5: mapped addresses keep the dotted quad (Python < 3.13 prints hex)
        return f"::ffff:{mapped}" if mapped is not None else str(addr)
    return None


def state_name(linux_state: int) -> str | None:
    """Linux enum tcp_state -> FreeBSD name (providers.md 4.4); None for 0/unknown."""
    return LINUX_TCP_STATES.get(linux_state)


def ca_state_name(value: int) -> str | None:
    return CA_STATE_NAMES[value] if 0 <= value < len(CA_STATE_NAMES) else None


def collector_envelope(
    env: KernelEnv, probe: str, hook: str, provider: str = "nettrail", ts_ns: int | None = None
) -> dict[str, Any]:
    """The envelope of a record the collector makes itself (status, stats, sampling, loss,
    stack counters): stamped now (or at ts_ns, kernel monotonic time), about no socket."""
    return {
        "host_id": env.host_id,
        "boot_id": env.boot_id,
        "seq": 0,
        "ts_ns": time.monotonic_ns() if ts_ns is None else ts_ns,
        "ts_wall": round(time.time(), 6),
        "provider": provider,
        "probe": probe,
        "hook": hook,
    }


def envelope(raw: Raw, env: KernelEnv, provider: str, probe: str, hook: str) -> dict[str, Any]:
    """Envelope and 4-tuple keyword arguments (local side first) of one raw event."""
    family = raw["family"]
    cookie = raw["cookie"]
    out: dict[str, Any] = {
        "host_id": env.host_id,
        "boot_id": env.boot_id,
        "seq": 0,
        "ts_ns": raw["ts_ns"],
        "ts_wall": env.wall(raw["ts_ns"]),
        "provider": provider,
        "probe": probe,
        "hook": hook,
        "cpu": raw["cpu"],
        "netns": raw["netns"] or None,
        "ctx": CTX.get(raw["ctx"], "unknown"),
        "conn_uuid": env.conn_uuid(cookie),
        "sock_cookie": cookie or None,
        "ip_ver": 4 if family == AF_INET else 6 if family == AF_INET6 else None,
        "src": env.address(family, raw["saddr"]),
        "sport": raw["sport"] if family else None,
        "dst": env.address(family, raw["daddr"]),
        "dport": raw["dport"] if family else None,
    }
    how = ATTRIBUTION.get(raw["attribution"])
    if how is not None:
        out.update(
            pid=raw["pid"],
            tgid=raw["tgid"],
            comm=kernel_text(raw["comm"]),
            uid=raw["uid"],
            gid=raw["gid"],
            cgroup_id=raw["cgroup_id"],
            attribution=how,
        )
    return out


def without_flow(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Envelope only, for record kinds that are not FlowRecords."""
    for name in ("ip_ver", "src", "sport", "dst", "dport"):
        kwargs.pop(name, None)
    return kwargs
