"""``POST /api/ingest``: batches of records from collectors, by per-host bearer token.

The contract (docs/webapp.md, shared with collector/sinks/http): body = array of
records in MessagePack or JSON (Content-Type decides); 200 ``{"stored", "duplicates", "tracing"}``
(tracing: what the dashboard asks this token's host to trace, webapp/traces/tracing.py);
401 missing/unknown token; 403 a record of another host, or whose conn_uuid was
not derived from the token's host (owner.py); 400 names the first bad
record's index and field (a bad value: values.py; an impossible time: timestamps.py);
413 over NETTRAIL_INGEST_MAX_BYTES; 405/415 for the wrong method or type. A batch is
stored whole or not at all, so a rejected batch leaves the ones before and after it intact. With REDIS_URL set the batch is appended to the
ingest stream instead (``_enqueue``, docs/scale-out.md). CSRF-exempt: the token, not a cookie, authenticates.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal, cast

import msgspec
from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from redis.exceptions import RedisError

from translators.records import Record, decode_batch
from webapp.bus import streams as bus
from webapp.http import json_error
from webapp.traces import alert_mail, owner, push, tokens, tracing
from webapp.traces.models import IngestToken
from webapp.traces.store import UnstorableRecord, store_batch
from webapp.traces.timestamps import first_impossible_time
from webapp.traces.values import first_bad_value

CONTENT_TYPES: dict[str, Literal["json", "msgpack"]] = {
    "application/json": "json",
    "application/msgpack": "msgpack",
    "application/x-msgpack": "msgpack",
    "application/vnd.msgpack": "msgpack",
}
_AT = re.compile(r"^(?P<why>.*) - at `\$\[(?P<index>\d+)\](?:\.(?P<field>[\w.\[\]]+))?`$", re.S)
_NAMED = re.compile(r"^\w+\.(?P<field>\w+): (?P<why>.*)$", re.S)  # records.__post_init__ messages
_BACKTICK = re.compile(r"field `(?P<field>\w+)`")


def _ingest(request: HttpRequest) -> JsonResponse:
    token = _bearer(request)
    if token is None:
        return json_error(401, "missing ingest token")
    row = tokens.authenticate(token)
    if row is None:
        return json_error(401, "unknown ingest token")
    if request.method != "POST":
        return json_error(405, "use POST")
    wire = CONTENT_TYPES.get(request.content_type or "")
    if wire is None:
        return json_error(415, f"Content-Type must be one of {', '.join(CONTENT_TYPES)}")
    body = _read_body(request, settings.NETTRAIL_INGEST_MAX_BYTES)
    if body is None:
        return json_error(413, f"body over {settings.NETTRAIL_INGEST_MAX_BYTES} bytes")
    try:
        records = decode_batch(body, wire)
    except msgspec.ValidationError as exc:
        return _bad_record(str(exc))
    except msgspec.DecodeError as exc:
        return json_error(400, f"malformed {wire} body: {exc}")
    foreign = _foreign_record(records, row.host.name)
    if foreign is not None:
        return foreign
    bad = first_bad_value(records)  # never stored: inf, NUL, beyond 64 bits, overlong text
    if bad is None:  # nor a time before 2000 or over a day ahead, a negative kernel clock
        bad = first_impossible_time(records)
    if bad is not None:
        return json_error(400, str(bad), index=bad.index, field=bad.field)
    stranger = owner.foreign_connection(records, row.host.name)
    if stranger is not None:
        return json_error(403, stranger.message, index=stranger.index, field="conn_uuid")
    if bus.enabled():
        return _enqueue(row, records)
    try:
        result = store_batch(records)
    except UnstorableRecord as exc:
        return json_error(400, str(exc), index=exc.index, field=exc.field)
    tokens.mark_used(row)
    push.push(result.new)
    alert_mail.MAILER.submit(result.new)  # queues only: mail goes from a background thread
    return JsonResponse(
        {"stored": result.stored, "duplicates": result.duplicates, "tracing": tracing.answer_of(row.host)}
    )


def _enqueue(row: IngestToken, records: list[Record]) -> JsonResponse:
    """Scale-out (REDIS_URL): append to the Redis stream; a writer stores it (webapp/bus).

    200 only once Redis holds the batch; 503 otherwise, and the collector's spool
    sends it again. `stored` counts what was accepted: the writer finds duplicates.
    """
    try:
        bus.append(row.host.name, records)
    except RedisError as exc:
        return json_error(503, f"ingest bus unavailable: {exc}")
    tokens.mark_used(row)
    return JsonResponse(
        {"stored": len(records), "duplicates": 0, "queued": True, "tracing": tracing.answer_of(row.host)}
    )


# Django's decorators are untyped: the cast keeps the view's signature for mypy.
ingest = cast(Callable[[HttpRequest], JsonResponse], csrf_exempt(login_not_required(_ingest)))


def _bearer(request: HttpRequest) -> str | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    value = value.strip()
    return value if scheme.lower() == "bearer" and value else None


def _read_body(request: HttpRequest, limit: int) -> bytes | None:
    """The body, or None when it is over the limit (checked before reading when declared)."""
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if declared.isdigit() and int(declared) > limit:
        return None
    body = request.read(limit + 1)
    return None if len(body) > limit else body


def _bad_record(message: str) -> JsonResponse:
    at = _AT.match(message)
    if at is None:
        return json_error(400, f"malformed batch: {message}")
    index, why, field = int(at["index"]), at["why"], at["field"]
    named = _NAMED.match(why)
    if field is None and named is not None:
        field, why = named["field"], named["why"]
    if field is None:
        backtick = _BACKTICK.search(why)
        field = backtick["field"] if backtick else None
    where = f"record {index}: {field}: " if field else f"record {index}: "
    return json_error(400, where + why, index=index, field=field)


def _foreign_record(records: list[Record], host: str) -> JsonResponse | None:
    for index, rec in enumerate(records):
        if rec.host_id != host:
            return json_error(
                403,
                f"record {index}: host_id {rec.host_id!r} is not this token's host {host!r}",
                index=index,
                field="host_id",
            )
    return None
