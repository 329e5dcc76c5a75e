"""Download endpoints: reports in xo styles, a connection's export, a host's SIFTR log.

GET /api/report?host=&connection=&since=&until=&kind=&format=json|xml|text|html|pcap|siftr|zeek
GET /api/connections/<uuid>/export?format=json|xml|text|html|pcap|siftr|zeek[&siftrver=]
GET /api/hosts/<name>/siftr?since=&until=&siftrver=
``format`` takes any --libxo string too (``json,pretty``). Login required (the
project middleware). Bodies stream: StreamingHttpResponse over the report
generators, handed out in ~64 KiB chunks; under ASGI each chunk is produced in the
request's sync thread, so the ORM cursor never changes threads. Errors before the
first byte are JSON ``{"error": ...}``: 400 bad filter/style, 404 unknown
connection/host, 409 nothing to export.
Keep in sync with: docs/reports.md, nettrail/commands/report.py (same filters).
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, TextIO

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from django.views.decorators.http import require_GET

from analysis.export.filters import FilterError, ReportFilter, build_filter
from webapp.http import json_error
from webapp.reports.exports import SIFTR_VERSIONS, ExportUnavailable, pcap_steps, siftr_steps
from webapp.reports.render import ReportNotFound, check, report_steps
from webapp.reports.zeek import zeek_steps
from xo import Writer, XoOptionError, command_options

FLUSH_BYTES = 64 * 1024
STYLE_TYPES = {
    "json": "application/json",
    "xml": "application/xml",
    "text": "text/plain",
    "html": "text/html",
}
HTML_HEAD = '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>nettrail report</title></head><body>\n'
HTML_TAIL = "\n</body></html>\n"
Buffer = io.BytesIO | io.StringIO


@require_GET
def report(request: HttpRequest) -> HttpResponseBase:
    return _guarded(request, lambda: _export(request, _filter(request), "nettrail"))


@require_GET
def connection_export(request: HttpRequest, conn_uuid: str) -> HttpResponseBase:
    return _guarded(request, lambda: _export(request, _filter(request, connection=conn_uuid), conn_uuid))


@require_GET
def host_siftr(request: HttpRequest, name: str) -> HttpResponseBase:
    return _guarded(request, lambda: _siftr(request, _filter(request, host=name), f"{name}.siftr"))


# --- helpers -----------------------------------------------------------------------------------------


def _export(request: HttpRequest, f: ReportFilter, stem: str) -> HttpResponseBase:
    """format=pcap | siftr | an xo style (json, xml, text, html, or a --libxo string)."""
    fmt = request.GET.get("format", "json")
    if fmt == "pcap":
        check(f)
        return _stream(request, lambda out: pcap_steps(out, f), True, "application/vnd.tcpdump.pcap", f"{stem}.pcap")
    if fmt == "siftr":
        return _siftr(request, f, f"{stem}.siftr")
    if fmt == "zeek":  # Zeek's conn.log of the connection summaries in scope
        check(f)
        return _stream(request, lambda out: zeek_steps(out, f), False, "text/plain; charset=utf-8", f"{stem}.conn.log")
    return _report(request, f)


def _guarded(request: HttpRequest, run: Callable[[], HttpResponseBase]) -> HttpResponseBase:
    try:
        return run()
    except (FilterError, XoOptionError) as exc:
        return json_error(400, str(exc))
    except ReportNotFound as exc:
        return json_error(404, str(exc))
    except ExportUnavailable as exc:
        return json_error(409, str(exc))


def _filter(request: HttpRequest, *, connection: str | None = None, host: str | None = None) -> ReportFilter:
    q = request.GET
    return build_filter(
        hosts=host if host is not None else q.get("host"),
        connection=connection if connection is not None else q.get("connection"),
        since=q.get("since"),
        until=q.get("until"),
        kinds=q.get("kind"),
    )


def _report(request: HttpRequest, f: ReportFilter) -> HttpResponseBase:
    options = command_options(request.GET.get("format", "json"))
    check(f)
    style = str(options.style)
    ctype = STYLE_TYPES.get(style, "text/plain")
    suffix = {"text": "txt"}.get(style, style)

    def steps(out: TextIO) -> Iterator[None]:
        if style == "html":
            out.write(HTML_HEAD)
        yield from report_steps(Writer(out, options), f)
        if style == "html":
            out.write(HTML_TAIL)

    return _stream(request, steps, False, f"{ctype}; charset=utf-8", f"nettrail-report.{suffix}")


def _siftr(request: HttpRequest, f: ReportFilter, filename: str) -> HttpResponseBase:
    version = request.GET.get("siftrver", "1.3.0")
    if version not in SIFTR_VERSIONS:
        raise FilterError(f"unknown siftrver {version!r}; known: {', '.join(SIFTR_VERSIONS)}")
    check(f)
    return _stream(request, lambda out: siftr_steps(out, f, version), False, "text/plain; charset=us-ascii", filename)


def _stream(
    request: HttpRequest,
    make_steps: Callable[[Any], Iterator[None]],
    binary: bool,
    content_type: str,
    filename: str,
) -> HttpResponseBase:
    buf: Buffer = io.BytesIO() if binary else io.StringIO()
    chunks = _pump(make_steps(buf), buf)
    first = next(chunks, b"")  # runs the pre-checks: their errors still get a JSON status
    body = _prepend(first, chunks)
    content: Any = _async_chunks(body) if isinstance(request, ASGIRequest) else body
    response = StreamingHttpResponse(content, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _pump(steps: Iterator[None], buf: Buffer) -> Iterator[bytes]:
    for _ in steps:
        if buf.tell() >= FLUSH_BYTES:
            yield _take(buf)
    rest = _take(buf)
    if rest:
        yield rest


def _take(buf: Buffer) -> bytes:
    data = buf.getvalue()
    buf.seek(0)
    buf.truncate()
    return data if isinstance(data, bytes) else data.encode("utf-8")


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _next_chunk(chunks: Iterator[bytes]) -> bytes | None:
    return next(chunks, None)


async def _async_chunks(chunks: Iterator[bytes]) -> AsyncIterator[bytes]:
    """ASGI: pull each chunk in the request's sync thread (the DB cursor lives there)."""
    pull = sync_to_async(_next_chunk, thread_sensitive=True)
    while True:
        chunk = await pull(chunks)
        if chunk is None:
            return
        yield chunk
