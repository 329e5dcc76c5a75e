"""Which host a connection belongs to: ingest's ownership check and host-keyed lookups.

A conn_uuid is derived from its host (translators/records.py): ``connection_uuid(host,
boot, sock_cookie)`` for live sockets, ``flow_uuid(host, capture, proto, stream)`` for
capture flows. Ingest recomputes it from the token's host for every record that carries
the cookie or the stream and refuses (403) one that does not match; a record without
them (a capture's tcp_state, a SIFTR-log sample) may not name a connection another host
already has. Connection rows are keyed by (host_id, conn_uuid) (lifecycle.py), so even a
conn_uuid two hosts share never mixes their records: every read goes through
`connection_of`, which names the host, and reads records by host and conn_uuid; the JSON
views (the host-token API's and the dashboard's) answer through `connection_or_error`.
Keep in sync with: translators/records.py (the derivations), webapp/traces/ingest.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.http import JsonResponse

from translators.records import Record, connection_uuid, flow_uuid
from webapp.http import json_error
from webapp.traces.models import Connection

LOOKUP_CHUNK = 500


@dataclass(frozen=True)
class Foreign:
    index: int
    message: str


def foreign_connection(records: Sequence[Record], host: str) -> Foreign | None:
    """The first record whose conn_uuid does not belong to `host`, or None."""
    derived: dict[tuple[str, object], str] = {}  # (boot, cookie or (proto, stream)) -> uuid
    own: set[str] = set()
    unproven: dict[str, int] = {}  # conn_uuid -> first index of a record that cannot prove it
    for index, rec in enumerate(records):
        uuid = rec.conn_uuid
        if uuid is None:
            continue
        expected = _derived(rec, host, derived)
        if expected is None:
            unproven.setdefault(uuid, index)
        elif expected == uuid:
            own.add(uuid)
        else:
            return Foreign(index, f"record {index}: conn_uuid {uuid} was not derived from host {host!r}")
    rest = sorted(set(unproven) - own)
    for start in range(0, len(rest), LOOKUP_CHUNK):
        taken = (
            Connection.objects.filter(conn_uuid__in=rest[start : start + LOOKUP_CHUNK])
            .exclude(host_id=host)
            .values_list("conn_uuid", flat=True)
        )
        first = min((unproven[u] for u in taken), default=None)
        if first is not None:
            uuid = records[first].conn_uuid
            return Foreign(first, f"record {first}: conn_uuid {uuid} belongs to another host")
    return None


def _derived(rec: Record, host: str, cache: dict[tuple[str, object], str]) -> str | None:
    cookie = rec.sock_cookie
    if cookie:
        key: tuple[str, object] = (rec.boot_id, cookie)
        found = cache.get(key)
        if found is None:
            found = cache[key] = connection_uuid(host, rec.boot_id, cookie)
        return found
    stream = getattr(rec, "stream", None)
    if stream is None:
        return None
    proto = getattr(rec, "proto", None) or "tcp"  # tcp_segment has no proto field: TCP only
    key = (rec.boot_id, (proto, stream))
    found = cache.get(key)
    if found is None:
        found = cache[key] = flow_uuid(host, rec.boot_id, proto, stream)
    return found


class Ambiguous(Exception):
    """A conn_uuid two hosts share (only a record that could not prove its uuid makes
    one): the caller must name the host."""

    def __init__(self, conn_uuid: str, hosts: list[str]) -> None:
        super().__init__(f"connection {conn_uuid} exists on hosts {', '.join(hosts)}: add host=")
        self.hosts = hosts


def connection_of(conn_uuid: str, host: str | None = None) -> Connection | None:
    """The connection row of `conn_uuid` on `host` (on its only host when None).

    Raises Ambiguous when no host is named and several hosts have the uuid."""
    rows = Connection.objects.filter(conn_uuid=conn_uuid)
    if host is not None:
        found: Connection | None = rows.filter(host_id=host).first()
        return found
    found_rows = list(rows[:2])
    if len(found_rows) > 1:
        raise Ambiguous(conn_uuid, sorted(r.host_id for r in rows))
    return found_rows[0] if found_rows else None


def connection_or_error(conn_uuid: str, host: str | None = None) -> Connection | JsonResponse:
    """`connection_of` as a JSON view answers it: the row, or the error to return (409 when
    several hosts have the uuid and none is named, 404 when `host` has no such connection)."""
    try:
        conn = connection_of(conn_uuid, host)
    except Ambiguous as exc:
        return json_error(409, str(exc))
    if conn is None:
        return json_error(404, f"no connection {conn_uuid}")
    return conn
