"""The record envelope: the fields every record carries, the 4-tuple of flow records, and their checks.

:class:`Record` is the base every record kind derives from (providers.md 0.1):
identity of the host, boot and sequence, timestamps, provider and probe, and the owner
attribution. :class:`FlowRecord` adds the 4-tuple. Building a record checks each
field's type and vocabulary once (a per-class plan built from :func:`describe`); the
wire decoders mark their thread with :func:`_decoding` so the type checks msgspec has
already done are not repeated. Connection identities (:func:`connection_uuid`,
:func:`flow_uuid`) are derived here too, since they fill the envelope's ``conn_uuid``.

Keep in sync with: ``../shared/docs/providers.md`` §0.1 (the envelope),
translators/records_fields.py (vocabularies, doc(), describe()),
translators/records.py (the wire decoders that use _decoding()).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import typing
import uuid
from dataclasses import dataclass
from typing import Annotated, Union

import msgspec

from translators.records_fields import PROVIDERS, SCHEMA, Int, Str, describe, doc

# --- the envelope ----------------------------------------------------------------


class Record(msgspec.Struct, kw_only=True, tag_field="kind", forbid_unknown_fields=True, gc=False):
    """Envelope present on every record (providers.md 0.1).

    gc=False: records are plain data that never reference themselves (no cycles), so
    the cycle collector need not track them; it cut a third off decoding a batch.
    """

    schema: Annotated[str, doc("schema id of this record")] = SCHEMA
    host_id: Annotated[str, doc("host that produced the record (collector host name or capture name)", index=True)]
    boot_id: Annotated[str, doc("boot id of the host (/proc/sys/kernel/random/boot_id) or capture id")]
    seq: Annotated[int, doc("collector sequence number, per (host, boot); gaps mean lost records")]
    ts_ns: Annotated[int, doc("kernel timestamp: CLOCK_MONOTONIC for live data, capture time since the epoch for files", unit="ns")]
    ts_wall: Annotated[float, doc("wall-clock time, seconds since the epoch", unit="s", fmt="%.6f", brief=True)]
    provider: Annotated[str, doc("provider that produced it", choices=PROVIDERS, brief=True)]
    probe: Annotated[str, doc("probe name (FreeBSD spelling with dashes, or the Linux-only name)", brief=True)]
    hook: Annotated[Str, doc("the Linux hook or capture source that produced it, e.g. tp_btf/tcp_probe")] = None
    cpu: Annotated[Int, doc("CPU the event fired on")] = None
    netns: Annotated[Int, doc("network namespace inode")] = None
    ctx: Annotated[Str, doc("execution context: task (attribution valid), softirq or unknown", choices=("task", "softirq", "unknown"))] = None
    conn_uuid: Annotated[Str, doc("persistent connection identity: UUID from (host, boot, socket cookie)", index=True)] = None
    sock_cookie: Annotated[Int, doc("kernel socket cookie (SO_COOKIE)")] = None
    skb_uid: Annotated[Int, doc("buffer lifecycle id (identity of one sk_buff lifetime)", index=True)] = None
    skb_gen: Annotated[Int, doc("generation of the buffer address, keeps reused addresses apart")] = None
    pid: Annotated[Int, doc("process id (thread id) of the owner", brief=True)] = None
    tgid: Annotated[Int, doc("thread-group id (the process) of the owner")] = None
    comm: Annotated[Str, doc("command name of the owner", brief=True, index=True)] = None
    uid: Annotated[Int, doc("user id of the owner")] = None
    gid: Annotated[Int, doc("group id of the owner")] = None
    cgroup_id: Annotated[Int, doc("cgroup v2 id of the owner")] = None
    attribution: Annotated[Str, doc("where pid/comm came from: current task or the socket-owner map", choices=("current", "owner-map"))] = None
    approx: Annotated[list[str], doc("names of fields that are derived or approximate on Linux")] = msgspec.field(default_factory=list)

    @property
    def kind(self) -> str:
        return typing.cast(str, type(self).__struct_config__.tag)

    def __post_init__(self) -> None:
        if _DECODING.trusted:
            return  # re-read from nettrail's own ingest stream: validated before it was queued
        cls = type(self)
        plan = _PLANS.get(cls) or _plan(cls)
        if not _DECODING.active:
            # Records built in Python: one C call fetches every value, then one set
            # lookup per field; the slow loop only runs to name a failure.
            for value, allowed in zip(msgspec.structs.astuple(self), plan.types, strict=True):
                if type(value) not in allowed:
                    _raise_type_error(self, plan)
        # Decoders (decode_batch, from_json, from_msgpack) already checked the types:
        # only the vocabularies remain, which msgspec cannot see in a plain `str`.
        for name, choices in plan.choices:
            value = getattr(self, name)
            if value is not None and value not in choices:
                raise ValueError(f"{self.kind}.{name}: {value!r:.60} is not one of {', '.join(choices)}")


class FlowRecord(Record, kw_only=True):
    """The 4-tuple, local side first for socket events, source first for packets."""

    ip_ver: Annotated[Int, doc("IP version, 4 or 6")] = None
    src: Annotated[Str, doc("source (or local) address", key=True, brief=True, index=True)] = None
    sport: Annotated[Int, doc("source (or local) port", key=True, brief=True, index=True)] = None
    dst: Annotated[Str, doc("destination (or remote) address", key=True, brief=True, index=True)] = None
    dport: Annotated[Int, doc("destination (or remote) port", key=True, brief=True, index=True)] = None


# --- identity ----------------------------------------------------------------------------------

_CONN_NAMESPACE = uuid.UUID("6f2d7a1e-3b5c-4c1e-9f51-6e6574747261")


def connection_uuid(host_id: str, boot_id: str, cookie: int) -> str:
    """Persistent connection id: the same socket always gets the same UUID (cookies never repeat in a boot)."""
    return str(uuid.uuid5(_CONN_NAMESPACE, f"{host_id}/{boot_id}/{cookie}"))


def flow_uuid(host_id: str, boot_id: str, proto: str, stream: int) -> str:
    """Connection id for a capture flow: host/capture id + protocol + stream index."""
    return str(uuid.uuid5(_CONN_NAMESPACE, f"{host_id}/{boot_id}/{proto}/{stream}"))


# --- per-class validation plans ------------------------------------------------------------------


@dataclass(frozen=True)
class _Plan:
    """Per-class validation data, built once: allowed types in struct field order
    (the order of msgspec.structs.astuple) and the fields that have choices."""

    types: tuple[frozenset[type], ...]
    choices: tuple[tuple[str, tuple[str, ...]], ...]
    checks: tuple[tuple[str, tuple[type, ...], tuple[str, ...] | None], ...]


class _DecodingFlag(threading.local):
    active = False  # True while this thread's msgspec decoder builds records
    trusted = False  # True while it re-reads records validated earlier (no checks at all)


_PLANS: dict[type, _Plan] = {}
_DECODING = _DecodingFlag()


def _plan(cls: type[Record]) -> _Plan:
    checks = _checks(cls)
    allowed = {name: frozenset(types_) for name, types_, _ in checks}
    plan = _Plan(
        types=tuple(allowed[name] for name in cls.__struct_fields__),
        choices=tuple((name, choices) for name, _, choices in checks if choices is not None),
        checks=checks,
    )
    _PLANS[cls] = plan
    return plan


def _raise_type_error(rec: Record, plan: _Plan) -> typing.NoReturn:
    for name, allowed, _ in plan.checks:
        value = getattr(rec, name)
        if type(value) not in allowed:
            expected = "|".join(t.__name__ for t in allowed)
            raise TypeError(f"{rec.kind}.{name}: expected {expected}, got {type(value).__name__} ({value!r:.60})")
    raise AssertionError("no field failed the check")  # pragma: no cover


@contextlib.contextmanager
def _decoding(trusted: bool = False) -> typing.Iterator[None]:
    """Marks this thread as decoding, so __post_init__ skips the type checks msgspec did.

    trusted: the data was validated by nettrail before (the ingest tier validates a
    batch before it queues it on the Redis stream): the vocabularies are skipped too.
    msgspec still checks the types, so bytes that are not such records still fail.
    """
    outer = (_DECODING.active, _DECODING.trusted)
    _DECODING.active, _DECODING.trusted = True, trusted
    try:
        yield
    finally:
        _DECODING.active, _DECODING.trusted = outer


@functools.cache
def _checks(cls: type[Record]) -> tuple[tuple[str, tuple[type, ...], tuple[str, ...] | None], ...]:
    checks = []
    for f in describe(cls):
        base = f.type
        if isinstance(base, type) and issubclass(base, msgspec.Struct):
            allowed: tuple[type, ...] = (base,)
        elif typing.get_origin(base) is Union:
            allowed = tuple(typing.get_args(base))
        else:
            allowed = (base,)
        if float in allowed:
            allowed = (*allowed, int)
        if f.nullable:
            allowed = (*allowed, type(None))
        checks.append((f.name, allowed, f.choices))
    return tuple(checks)
