"""Export one connection's stored records as JSON, XML, text or HTML through xo, streamed.

Rows are turned back into ``translators.records`` Structs (the one schema) and written
with ``xo.Writer.record()`` one at a time; output leaves in chunks as it is produced,
so a connection with millions of records never sits in memory. Document shape:
container ``nettrail`` holding ``connection`` (its identity) and one list per record
kind, in ``RECORD_TYPES`` order, each in kernel-time order.
pcap and SIFTR-log exports live in the read API (``/api/connections/<uuid>/export``).
Keep in sync with: xo (Writer API), webapp/traces/models.py (KIND_MODELS), connection.html.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import msgspec
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from translators.records import BY_KIND, Record, describe
from webapp.http import json_error
from webapp.traces import owner
from webapp.traces.models import KIND_MODELS, Connection
from webapp.traces.schema import CONNECTIONLESS_KINDS
from xo import Writer, XoOptionError, command_options

FORMATS = {
    "json": ("json,pretty", "application/json", "json"),
    "xml": ("xml,pretty", "application/xml", "xml"),
    "text": ("text", "text/plain; charset=utf-8", "txt"),
    "html": ("html", "text/html; charset=utf-8", "html"),
}
CHUNK_RECORDS = 500  # records per chunk sent to the client
ROW_BATCH = 2000  # rows fetched per database round trip


class _Chunks:
    """A text stream that collects what the Writer writes until it is taken."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def take(self) -> str:
        out = "".join(self.parts)
        self.parts.clear()
        return out


def to_record(kind: str, row: dict[str, Any]) -> Record:
    """A stored row back to its record (JSON columns decode to their list/struct types)."""
    cls = BY_KIND[kind]
    values = {f.name: row[f.name] for f in describe(cls)}
    for name, value in values.items():
        if isinstance(value, memoryview):
            values[name] = bytes(value)
    return msgspec.convert(values, cls)


def records_of(host: str, uuid: str) -> Iterator[Record]:
    for kind, model in KIND_MODELS.items():
        if kind in CONNECTIONLESS_KINDS:
            continue
        names = [f.name for f in describe(BY_KIND[kind])]
        rows = model.objects.filter(host_id=host, conn_uuid=uuid).order_by("ts_ns", "seq").values(*names)
        for row in rows.iterator(chunk_size=ROW_BATCH):
            yield to_record(kind, row)


def _render(conn: Connection, spec: str) -> Iterator[str]:
    stream = _Chunks()
    w = Writer(stream, command_options(spec))  # type: ignore[arg-type]
    w.open_container("nettrail")
    _identity(w, conn)
    for count, rec in enumerate(records_of(conn.host_id, conn.conn_uuid), start=1):
        w.record(rec)
        if count % CHUNK_RECORDS == 0:
            yield stream.take()
    w.finish()
    yield stream.take()


def _identity(w: Writer, conn: Connection) -> None:
    """The connection's identity as leaves of the container (non-null ones only)."""
    fields = [("conn-uuid", "%s", conn.conn_uuid), ("host", "%s", conn.host_id), ("proto", "%s", conn.proto)]
    fields += [
        ("src", "%s", conn.src),
        ("sport", "%u", conn.sport),
        ("dst", "%s", conn.dst),
        ("dport", "%u", conn.dport),
    ]
    present = [(name, fmt, value) for name, fmt, value in fields if value is not None]
    text = " ".join(f"{{:{name}/{fmt}}}" for name, fmt, _ in present) + "\n"
    w.emit(text, **{name.replace("-", "_"): value for name, _, value in present})


async def _async_chunks(chunks: Iterator[str]) -> AsyncIterator[str]:
    """Pull each chunk in a worker thread (ORM access), so ASGI streams instead of buffering."""

    def pull() -> str | None:
        return next(chunks, None)

    pull_async = sync_to_async(pull, thread_sensitive=True)
    while True:
        chunk = await pull_async()
        if chunk is None:
            return
        if chunk:
            yield chunk


def export(request: HttpRequest, uuid: str) -> HttpResponse:
    fmt = request.GET.get("format", "json")
    if fmt not in FORMATS:
        return json_error(400, f"format must be one of {', '.join(FORMATS)}")
    try:
        conn = owner.connection_of(uuid, request.GET.get("host") or None)
    except owner.Ambiguous as exc:
        return json_error(409, str(exc))
    if conn is None:
        return json_error(404, "no such connection")
    spec, content_type, ext = FORMATS[fmt]
    try:
        chunks = _render(conn, spec)
    except XoOptionError as exc:  # pragma: no cover - the specs above are fixed
        return json_error(500, str(exc))
    # Under ASGI (daphne) an async iterator streams; a WSGI server takes the generator itself.
    content = _async_chunks(chunks) if isinstance(request, ASGIRequest) else chunks
    response = StreamingHttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="nettrail-{uuid[:8]}.{ext}"'
    return response
