"""COPY-ready stream entries: the ingest tier formats the rows, a writer COPYs those bytes as they are.

On PostgreSQL (`-m postgres` with DATABASE_URL) a batch stored from its entry's
`copy` field must leave exactly the rows and Connection values the writer's own row
building leaves (text with COPY's special characters, bytea, JSON, bools, floats,
NULLs, a second day partition), and a resent batch still takes the exact duplicate
path. The trusted decode the writer uses skips the vocabularies, never the types.
"""
# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from django.db import connection
from webapp_cast import BOOT, T0, env, retransmit, state

from translators import records as r
from translators.records import decode_batch
from webapp.bus import streams
from webapp.traces.models import KIND_MODELS, Connection
from webapp.traces.store import store_batch

DAY = 86_400.0
T0_DAY = int(T0 // DAY)  # the day partition of the cast's records
FRAME = bytes(range(256))
AWKWARD = "lo\tx\\y\nz\r ü \\N"  # COPY text's separators, escapes and its NULL marker, literally


def _batch() -> list[r.Record]:
    return [
        state("host-a", 1, "SYN_SENT", "ESTABLISHED", active=True, comm=AWKWARD, pid=7),
        retransmit("host-a", 2, approx=["src", "pid"]),
        r.IpPacket(
            **env("host-a", 3),
            provider="ip",
            probe="send",
            if_name=AWKWARD,
            if_local=True,
            length=1500,
            frame_bytes=FRAME,
        ),
        retransmit("host-a", 4, ts_wall=T0 + 3 * DAY + 0.123456789),  # a later day's partition
    ]


def _stored() -> dict[str, list[tuple[Any, ...]]]:
    tables = {
        kind: sorted(tuple(row[1:]) for row in model.objects.order_by("seq").values_list())
        for kind, model in KIND_MODELS.items()
    }
    tables["Connection"] = [tuple(row[1:]) for row in Connection.objects.order_by("conn_uuid").values_list()]
    return {name: rows for name, rows in tables.items() if rows}


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_copy_ready_rows_store_what_the_writers_own_rows_store() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("COPY-ready rows are PostgreSQL's (run with -m postgres and DATABASE_URL)")
    from webapp.traces import pgcopy

    batch = _batch()
    fields = streams.entry_fields("host-a", batch)
    assert decode_batch(fields["body"], "msgpack", trusted=True) == batch  # type: ignore[arg-type]
    encoded = pgcopy.decode(fields["copy"])  # type: ignore[arg-type]
    assert [(kind, days) for kind, days, _ in encoded] == [
        ("tcp_state", [T0_DAY]),
        ("tcp_retransmit", [T0_DAY, T0_DAY + 3]),
        ("ip_packet", [T0_DAY]),
    ]
    result = store_batch(decode_batch(fields["body"], "msgpack", trusted=True), encoded)  # type: ignore[arg-type]
    # The new records in batch order (not kind by kind, as COPY goes): the fold's order.
    assert (result.stored, result.duplicates, [rec.seq for rec in result.new]) == (4, 0, [1, 2, 3, 4])
    from_copy = _stored()
    packet = KIND_MODELS["ip_packet"].objects.get()
    assert (bytes(packet.frame_bytes), packet.if_name, packet.if_local) == (FRAME, AWKWARD, True)
    assert KIND_MODELS["tcp_retransmit"].objects.get(seq=2).approx == ["src", "pid"]
    assert KIND_MODELS["tcp_retransmit"].objects.get(seq=4).ts_wall == T0 + 3 * DAY + 0.123456789
    conn = Connection.objects.get()
    assert (conn.comm, conn.pid, conn.retransmits, conn.state, conn.active) == (AWKWARD, 7, 2, "ESTABLISHED", True)

    for model in [*KIND_MODELS.values(), Connection]:
        model.objects.all().delete()
    assert store_batch(batch).stored == 4  # the writer builds the rows itself
    assert _stored() == from_copy


@pytest.mark.django_db
@pytest.mark.postgres
def test_a_resent_batch_with_copy_ready_rows_stores_only_its_new_records() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("COPY-ready rows are PostgreSQL's (run with -m postgres and DATABASE_URL)")
    from webapp.traces import pgcopy

    first = _batch()[:2]
    assert store_batch(first, pgcopy.encode(first)).stored == 2
    again = [*first, retransmit("host-a", 5)]
    result = store_batch(again, pgcopy.encode(again))
    assert (result.stored, result.duplicates, [rec.seq for rec in result.new]) == (1, 2, [5])
    assert sorted(KIND_MODELS["tcp_retransmit"].objects.values_list("seq", flat=True)) == [2, 5]
    assert Connection.objects.get().retransmits == 2


def test_the_trusted_decode_skips_the_vocabularies_not_the_types() -> None:
    good = msgspec.to_builtins(retransmit("host-a", 1))
    odd = {**good, "retrans_kind": "not-a-kind"}
    body = msgspec.msgpack.encode([odd])
    with pytest.raises(msgspec.ValidationError, match="retrans_kind"):
        decode_batch(body, "msgpack")
    (rec,) = decode_batch(body, "msgpack", trusted=True)
    assert (rec.seq, rec.retrans_kind) == (1, "not-a-kind")  # type: ignore[attr-defined]
    with pytest.raises(msgspec.ValidationError, match=r"\$\[0\]\.seq"):
        decode_batch(msgspec.msgpack.encode([{**good, "seq": "one"}]), "msgpack", trusted=True)
    assert (rec.boot_id, type(rec)) == (BOOT, r.TcpRetransmit)
