"""The scale-out writer's view of a batch: each record decoded with only the fields it reads.

A writer given an entry's COPY-ready rows (pgcopy.py) no longer needs a record's
values to store it; what it still reads is what the Connection fold (lifecycle.py)
and the store hooks (webapp/metrics/counting.py) read. Decoding every field of every
record, then freeing them, was half of a writer's CPU in bench/bench_pg_ingest.py;
msgspec skips the fields a struct does not name without building them. So each kind
gets a view struct (same tag) with:

* the kinds the fold tracks: the envelope it reads (host, boot, times, connection,
  owner, 4-tuple and proto when the kind has them) plus the kind's own fields below;
* the kinds only the hooks count: the host and the fields below;
* every other kind: the host only (the hooks count records per host and kind);
* alerts, connection summaries and tcp_lifecycle: the whole record (the alert mail reads
  alerts; a summary feeds most of the fold; a lifecycle is expanded into the records it
  stands for, webapp/traces/folded.py).

The view is only for an all-new batch stored from its COPY-ready rows
(store.store_new_batch); a batch with duplicates, a refused value or a live push
with listeners decodes the whole records again (webapp/bus/writer.py).
Keep in sync with: lifecycle.py (what the fold reads), webapp/metrics/counting.py
(_extra), webapp/traces/alert_mail.py; tests/test_writer_view.py checks both agree.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from translators.records import BY_KIND, RECORD_TYPES, Record, decode_trusted

ENVELOPE = ("host_id", "boot_id", "seq", "ts_ns", "ts_wall", "conn_uuid", "ctx", "pid", "tgid", "comm", "uid")
FLOW = ("ip_ver", "src", "sport", "dst", "dport", "proto")
# Kinds the fold tracks (lifecycle._FOLDERS, except the whole ones) -> what it reads of them.
TRACKED: dict[str, tuple[str, ...]] = {
    "tcp_state": ("prev_state", "state", "active"),  # prev_state: the hooks' opened/closed
    "tcp_retransmit": (),
    "tcp_reset": ("sender",),
    "siftr_sample": ("srtt", "snd_cwnd"),
    "flow_counters": ("bytes_in", "bytes_out", "packets_in", "packets_out"),
}
# Kinds only the hooks read (counting._extra).
COUNTED: dict[str, tuple[str, ...]] = {
    "skb_drop": ("drop_reason_str", "drop_location", "comm", "tgid", "ts_wall"),  # + drop_summary.tally
    "drop_count": ("drop_reason_str", "delta"),
    "loss_report": ("event_type", "lost"),
}
WHOLE = frozenset({"alert", "connection", "tcp_lifecycle"})  # tcp_lifecycle: expanded (folded.py)


class _View(msgspec.Struct, kw_only=True, tag_field="kind", gc=False):
    @property
    def kind(self) -> str:
        return str(type(self).__struct_config__.tag)


def _view_type(cls: type[Record]) -> Any:
    kind = str(cls.__struct_config__.tag)
    if kind in WHOLE:
        return cls
    if kind in TRACKED:
        wanted = {*ENVELOPE, *FLOW, *TRACKED[kind]}
    else:
        wanted = {"host_id", *COUNTED.get(kind, ())}
    fields: list[tuple[str, Any, Any] | tuple[str, Any]] = []
    for info in msgspec.structs.fields(cls):
        if info.name not in wanted:
            continue
        if info.default is not msgspec.NODEFAULT:
            fields.append((info.name, Any, info.default))
        elif info.default_factory is not msgspec.NODEFAULT:
            fields.append((info.name, Any, msgspec.field(default_factory=info.default_factory)))
        else:
            fields.append((info.name, Any))
    missing = wanted - {f[0] for f in fields} - set(FLOW)
    assert not missing, f"{kind} has no {missing}"  # a renamed field must be renamed here too
    return msgspec.defstruct(
        f"{cls.__name__}View", fields, bases=(_View,), kw_only=True, tag_field="kind", tag=kind, gc=False
    )


# Record type -> its view type (the same type for the whole kinds).
VIEWS: dict[type[Record], Any] = {cls: _view_type(cls) for cls in RECORD_TYPES}
KIND_OF_VIEW: dict[Any, str] = {view: str(cls.__struct_config__.tag) for cls, view in VIEWS.items()}
_decoder = msgspec.msgpack.Decoder(list[Union[tuple(VIEWS.values())]])  # type: ignore[misc]  # noqa: UP007


def decode(body: bytes) -> list[Any]:
    """A stream entry's records (MessagePack, validated by the ingest tier) as views."""
    return decode_trusted(_decoder, body)  # type: ignore[no-any-return]


def view_of(kind: str) -> Any:
    return VIEWS[BY_KIND[kind]]
