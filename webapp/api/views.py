"""The read API: hosts, connections (filters + cursor pages), one connection's lifecycle,
drop summaries, alerts and loss reports, as JSON for programs.

Every view is an ``api_view`` (login, GET only, declared parameters -> 400 with a
message, documented in /api/schema from the same declarations). Record rows are
returned in the record's wire form. Keep in sync with docs/api.md and
webapp/api/openapi.py (through the declarations), webapp/traces/models.py (indexes).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Q, QuerySet, Sum
from django.http import HttpResponse, JsonResponse

from translators.records import SEVERITIES, TCP_STATES
from webapp.api.decorators import ApiRequest, api_view
from webapp.api.params import BadParam, Param, encode_cursor
from webapp.api.rows import (
    CONNECTION_COLUMNS,
    connection_dict,
    keyset_page,
    model_dict,
    record_columns,
    record_dicts,
)
from webapp.traces import owner, recency, skb_recording
from webapp.traces.models import KIND_MODELS, Connection, Host, RecordModel
from webapp.traces.schema import CONNECTIONLESS_KINDS

Alert, DropCount, LossReport, SkbDrop = (KIND_MODELS[k] for k in ("alert", "drop_count", "loss_report", "skb_drop"))

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
LIFECYCLE_LIMIT = 5000
MAX_LIFECYCLE_LIMIT = 50_000
# Tie-break of records with the same kernel timestamp: the order things happen in.
LIFECYCLE_KINDS = tuple(k for k in KIND_MODELS if k not in CONNECTIONLESS_KINDS)
SKB_KINDS = ("skb_event", "skb_drop")
DROP_GROUPINGS = ("reason", "location", "process")

HOST = Param("host", "str", "host name (the records' host_id)")
SINCE = Param("since", "float", "from this time on, seconds since the epoch")
UNTIL = Param("until", "float", "up to this time, seconds since the epoch")
CURSOR = Param("cursor", "cursor", "continue after the last row of the previous page (its `next`)")
LIMIT = Param("limit", "int", "rows per page", minimum=1, maximum=MAX_LIMIT, default=DEFAULT_LIMIT)
UUID_PATH = {"conn_uuid": "the connection's UUID (records' conn_uuid)"}


def _time_range(qs: QuerySet[Any], params: dict[str, Any], field: str = "ts_wall") -> QuerySet[Any]:
    since, until = params.get("since"), params.get("until")
    if since is not None and until is not None and since > until:
        raise BadParam("since is after until")
    if since is not None:
        qs = qs.filter(**{f"{field}__gte": since})
    if until is not None:
        qs = qs.filter(**{f"{field}__lte": until})
    return qs


# --- hosts -------------------------------------------------------------------------------


@api_view("Hosts that send records (collectors and imported captures)", returns="{hosts: [...]}")
def hosts(request: ApiRequest) -> HttpResponse:
    counts = dict(Connection.objects.values_list("host_id").annotate(n=Count("id")).order_by())
    out = [
        {
            "name": host.name,
            "created": host.created.timestamp(),
            "last_seen": host.last_seen.timestamp() if host.last_seen else None,
            "connections": counts.get(host.name, 0),
        }
        for host in Host.objects.order_by("name")
    ]
    return JsonResponse({"hosts": out})


# --- connections ---------------------------------------------------------------------------

CONNECTION_PARAMS = (
    HOST,
    Param("comm", "str", "command name of the owning process"),
    Param("pid", "int", "process (thread) id of the owner", minimum=0),
    Param("uid", "int", "user id of the owner", minimum=0),
    Param("port", "int", "local or remote port (either side)", minimum=0, maximum=65535),
    Param("addr", "ip", "local or remote address (either side)"),
    Param("state", "enum", "last TCP state", choices=TCP_STATES),
    Param("has_anomaly", "bool", "an alert named the connection, or it was reset"),
    Param("since", "float", "active at or after this time (last_seen >= since), seconds since the epoch"),
    Param("until", "float", "active at or before this time (first_seen <= until), seconds since the epoch"),
    CURSOR,
    LIMIT,
)


@api_view(
    "Connections, most recently active first, with filters and cursor pages",
    CONNECTION_PARAMS,
    returns="{connections: [...], next: cursor|null}",
)
def connections(request: ApiRequest) -> HttpResponse:
    p = request.params
    qs = Connection.objects.all()
    for name in ("comm", "pid", "uid", "state"):
        if p[name] is not None:
            qs = qs.filter(**{name: p[name]})
    if p["host"] is not None:
        qs = qs.filter(host_id=p["host"])
    if p["has_anomaly"] is not None:
        qs = qs.filter(anomaly=p["has_anomaly"])
    if p["since"] is not None and p["until"] is not None and p["since"] > p["until"]:
        raise BadParam("since is after until")
    if p["since"] is not None:
        qs = recency.at_least(qs.filter(last_seen__gte=p["since"]), p["since"])
    if p["until"] is not None:
        qs = qs.filter(first_seen__lte=p["until"])
    branches = [qs]  # "either side" filters: one branch per side, merged page by page
    for param, sides in (("port", ("sport", "dport")), ("addr", ("src", "dst"))):
        if p[param] is not None:
            branches = [b.filter(**{side: p[param]}) for b in branches for side in sides]
    rows, following = keyset_page(branches, "last_seen", CONNECTION_COLUMNS, p["limit"], p["cursor"])
    return JsonResponse({"connections": [connection_dict(r) for r in rows], "next": following})


CONN_HOST = Param("host", "str", "the connection's host (needed only when two hosts have the same UUID)")


@api_view(
    "One connection: its row, record counts per kind and its latest summary record",
    (CONN_HOST,),
    path_params=UUID_PATH,
    returns="{connection: {...}, records: {kind: n}, summary: {...}|null}",
)
def connection_detail(request: ApiRequest, conn_uuid: str) -> HttpResponse:
    conn = owner.connection_or_error(conn_uuid, request.params["host"])  # 404/409 as JSON
    if isinstance(conn, HttpResponse):
        return conn
    counts = {}
    for kind in LIFECYCLE_KINDS:
        n = KIND_MODELS[kind].objects.filter(host_id=conn.host_id, conn_uuid=conn_uuid).count()
        if n:
            counts[kind] = n
    summary_model = KIND_MODELS["connection"]
    latest = (
        summary_model.objects.filter(host_id=conn.host_id, conn_uuid=conn_uuid)
        .order_by("-ts_ns", "-id")
        .values(*record_columns(summary_model))[:1]
    )
    summary = record_dicts(summary_model, list(latest))
    return JsonResponse({"connection": model_dict(conn), "records": counts, "summary": summary[0] if summary else None})


# --- lifecycle -------------------------------------------------------------------------------


@api_view(
    "Everything recorded about one connection, in kernel-time order (state changes, SIFTR samples, "
    "debug snapshots, retransmits, resets, congestion states, packets, its skbs and drops, alerts)",
    (
        CONN_HOST,
        Param("kind", "str", "only these record kinds, comma-separated (e.g. tcp_state,siftr_sample)"),
        CURSOR,
        Param("limit", "int", "records per page", minimum=1, maximum=MAX_LIFECYCLE_LIMIT, default=LIFECYCLE_LIMIT),
    ),
    path_params=UUID_PATH,
    returns="{conn_uuid, records: [...], next: cursor|null, skb_recording: {skb_sample, skb_stages, "
    "stages_note}|null (the host's buffer lifecycles: one in skb_sample followed; skb_stages 'ends': no "
    "transmit or receive entry stage recorded, stages_note says so)}",
)
def lifecycle(request: ApiRequest, conn_uuid: str) -> HttpResponse:
    conn = owner.connection_or_error(conn_uuid, request.params["host"])  # 404/409 as JSON
    if isinstance(conn, HttpResponse):
        return conn
    host = conn.host_id
    limit: int = request.params["limit"]
    after = _lifecycle_cursor(request.params["cursor"])
    wanted = _kinds(request.params["kind"])
    skb_uids = _skb_uids(host, conn_uuid)
    merged: list[tuple[tuple[int, int, int], dict[str, Any]]] = []
    for order, kind in enumerate(LIFECYCLE_KINDS):
        if kind not in wanted:
            continue
        model = KIND_MODELS[kind]
        match = Q(conn_uuid=conn_uuid)
        if kind in SKB_KINDS and skb_uids:
            # Stages seen before the kernel tied the buffer to the socket carry only skb_uid.
            match |= Q(conn_uuid__isnull=True, skb_uid__in=skb_uids)
        qs = _after(model.objects.filter(match, host_id=host), order, after)
        rows = list(qs.order_by("ts_ns", "id").values("id", *record_columns(model))[: limit + 1])
        for row, rec in zip(rows, record_dicts(model, rows), strict=True):
            merged.append(((row["ts_ns"], order, row["id"]), rec))
    merged.sort(key=lambda item: item[0])
    page = merged[:limit]
    following = encode_cursor(list(page[-1][0])) if len(merged) > limit else None
    return JsonResponse(
        {
            "conn_uuid": conn_uuid,
            "records": [rec for _, rec in page],
            "next": following,
            "skb_recording": skb_recording.recording(host),
        }
    )


def _kinds(value: str | None) -> frozenset[str]:
    if value is None:
        return frozenset(LIFECYCLE_KINDS)
    kinds = frozenset(k.strip() for k in value.split(",") if k.strip())
    unknown = sorted(kinds - set(LIFECYCLE_KINDS))
    if unknown:
        raise BadParam(f"kind {unknown[0]!r} is not a connection record kind ({', '.join(LIFECYCLE_KINDS)})")
    return kinds


def _lifecycle_cursor(cursor: list[Any] | None) -> tuple[int, int, int] | None:
    if cursor is None:
        return None
    if len(cursor) != 3 or not all(isinstance(v, int) for v in cursor):
        raise BadParam("cursor is not a cursor this API gave out")
    return cursor[0], cursor[1], cursor[2]


def _after(qs: QuerySet[Any], order: int, after: tuple[int, int, int] | None) -> QuerySet[Any]:
    """Rows after the cursor key (ts_ns, kind order, id), exactly, through the (conn_uuid, ts_ns) index."""
    if after is None:
        return qs
    ts, kind_order, last_id = after
    if order < kind_order:
        return qs.filter(ts_ns__gt=ts)
    if order == kind_order:
        return qs.filter(Q(ts_ns__gt=ts) | Q(ts_ns=ts, id__gt=last_id))
    return qs.filter(ts_ns__gte=ts)


def _skb_uids(host: str, conn_uuid: str) -> list[int]:
    """The skb_uids of the buffers this connection's skb records name (on its host)."""
    uids: set[int] = set()
    for kind in SKB_KINDS:
        uids.update(
            KIND_MODELS[kind]
            .objects.filter(host_id=host, conn_uuid=conn_uuid, skb_uid__isnull=False)
            .values_list("skb_uid", flat=True)
        )
    return sorted(uids)


# --- drops ---------------------------------------------------------------------------------------


@api_view(
    "Drops over a time range grouped by reason, kernel location or process: sampled drop events "
    "(skb_drop) and exact in-kernel counts (drop_count deltas)",
    (
        HOST,
        SINCE,
        UNTIL,
        Param("by", "enum", "grouping", choices=DROP_GROUPINGS, default="reason"),
        Param("limit", "int", "groups returned, largest first", minimum=1, maximum=MAX_LIMIT, default=DEFAULT_LIMIT),
    ),
    returns="{by, groups: [{reason|location|comm.., events, counted}], total_events, total_counted}",
)
def drops(request: ApiRequest) -> HttpResponse:
    p = request.params
    keys = {
        "reason": ("drop_reason_str",),
        "location": ("drop_reason_str", "drop_location"),
        "process": ("comm", "tgid"),
    }[p["by"]]
    events_qs = _time_range(SkbDrop.objects.all(), p)
    counted_qs = _time_range(DropCount.objects.all(), p)
    if p["host"] is not None:
        events_qs = events_qs.filter(host_id=p["host"])
        counted_qs = counted_qs.filter(host_id=p["host"])
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in events_qs.values(*keys).annotate(n=Count("id")).order_by():
        groups[tuple(row[k] for k in keys)] = {**_named(keys, row), "events": row["n"], "counted": None}
    if p["by"] != "process":  # the kernel's exact counters know no process
        for row in counted_qs.values(*keys).annotate(n=Sum("delta")).order_by():
            key = tuple(row[k] for k in keys)
            entry = groups.setdefault(key, {**_named(keys, row), "events": 0, "counted": None})
            entry["counted"] = row["n"]
    ordered = sorted(groups.values(), key=lambda g: (-(g["counted"] or g["events"]), str(list(g.values()))))
    return JsonResponse(
        {
            "by": p["by"],
            "groups": ordered[: p["limit"]],
            "total_events": sum(g["events"] for g in groups.values()),
            "total_counted": sum(g["counted"] or 0 for g in groups.values()),
        }
    )


_KEY_NAMES = {"drop_reason_str": "reason", "drop_location": "location", "comm": "comm", "tgid": "tgid"}


def _named(keys: tuple[str, ...], row: dict[str, Any]) -> dict[str, Any]:
    return {_KEY_NAMES[k]: row[k] for k in keys}


# --- alerts and loss ------------------------------------------------------------------------------


def _record_list(model: type[RecordModel], qs: QuerySet[Any], params: dict[str, Any], name: str) -> JsonResponse:
    qs = _time_range(qs, params)
    if params.get("host") is not None:
        qs = qs.filter(host_id=params["host"])
    rows, following = keyset_page(qs, "ts_wall", record_columns(model), params["limit"], params["cursor"])
    return JsonResponse({name: record_dicts(model, rows), "next": following})


@api_view(
    "Alert records, newest first",
    (
        HOST,
        Param("severity", "enum", "severity", choices=SEVERITIES),
        Param("rule", "str", "rule id, e.g. K1"),
        Param("status", "enum", "open or closed", choices=("open", "closed")),
        Param("conn", "str", "connection UUID"),
        SINCE,
        UNTIL,
        CURSOR,
        LIMIT,
    ),
    returns="{alerts: [...], next: cursor|null}",
)
def alerts(request: ApiRequest) -> HttpResponse:
    p = request.params
    qs = Alert.objects.all()
    for param, column in (("severity", "severity"), ("rule", "rule_id"), ("status", "status"), ("conn", "conn_uuid")):
        if p[param] is not None:
            qs = qs.filter(**{column: p[param]})
    return _record_list(Alert, qs, p, "alerts")


@api_view(
    "Loss reports (events the tracer could not deliver), newest first",
    (HOST, Param("event_type", "str", "event type that was lost"), SINCE, UNTIL, CURSOR, LIMIT),
    returns="{loss_reports: [...], next: cursor|null}",
)
def loss(request: ApiRequest) -> HttpResponse:
    p = request.params
    qs = LossReport.objects.all()
    if p["event_type"] is not None:
        qs = qs.filter(event_type=p["event_type"])
    return _record_list(LossReport, qs, p, "loss_reports")
