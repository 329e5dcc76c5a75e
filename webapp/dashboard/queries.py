"""The connections list: filter-language columns, sort keys and keyset (cursor) pages.

Pages are keyset-paginated — ``WHERE (sort key, id) < (last row's)`` — never OFFSET,
so page 2,000 costs what page 1 costs with 100,000 connections stored
(bench/bench_dashboard_pages.py measures it). Sorting by plain non-null columns
(first_seen, last_seen) can use the Connection table's indexes; computed keys
(duration, bytes) and nullable ones (NULL read as -1 / "") sort by expression.
Keep in sync with: webapp/traces/models.py (Connection columns), filterlang.FIELDS,
js/connections.js (sort keys, row fields).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import time
from dataclasses import dataclass
from typing import Any

from django.db.models import BigIntegerField, Exists, F, OuterRef, Q, QuerySet, TextField, Value
from django.db.models.functions import Coalesce

from webapp.dashboard import selfhealth
from webapp.dashboard.filterlang import (
    FIELD_BY_NAME,
    Columns,
    FilterError,
    QFactory,
    compare,
    conditions,
    either,
    parse,
    to_q,
)
from webapp.dashboard.tables import Alert, TcpLifecycle, TcpStateChange
from webapp.traces import recency
from webapp.traces.models import Connection

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_LIMIT = 50
MAX_UUIDS = 50  # live look-ups of new connections per request


# Linux keeps a socket in TIME_WAIT for TCP_TIMEWAIT_LEN (60 s, fixed); ss lists it as
# TIME-WAIT that long. The tracer sees the full socket freed as the state changes to
# TIME_WAIT (its timewait stand-in is not a full socket), so the stored state soon reads
# an inferred CLOSED; "state TIME_WAIT" also finds those that entered TIME_WAIT within it.
TIME_WAIT_S = 60.0


def entered_time_wait(since: float) -> Q:
    """Connections stored TIME_WAIT or CLOSED that entered TIME_WAIT at ``since`` or later."""
    entered = TcpStateChange.objects.filter(
        host_id=OuterRef("host_id"), conn_uuid=OuterRef("conn_uuid"), state="TIME_WAIT", ts_wall__gte=since
    )
    # tcp --tcp-fold: a folded socket's change into TIME_WAIT is its final lifecycle's
    # (time_wait; the inferred change's time is at most the lifecycle's)
    folded = TcpLifecycle.objects.filter(
        host_id=OuterRef("host_id"), conn_uuid=OuterRef("conn_uuid"), time_wait=True, ts_wall__gte=since
    )
    # last_seen >= since is implied (a connection's last_seen is at least each of its
    # records' ts_wall, lifecycle._fold_into): it spares the look-up for the long-closed
    # rows, most of a big table (index nt_conn_state_last).
    return Q(state__in=("TIME_WAIT", "CLOSED"), last_seen__gte=since) & (Q(Exists(entered)) | Q(Exists(folded)))


def _state(op: str, value: Any) -> Q:
    if value == "OPEN":
        q = Q(closed=False)
    elif value == "TIME_WAIT":
        q = Q(state="TIME_WAIT") | entered_time_wait(time.time() - TIME_WAIT_S)
    else:
        q = Q(state=value)
    return ~q if op == "!=" else q


def _anomaly(op: str, value: Any) -> Q:
    if not value:
        return Q(anomaly=True)
    return Q(Exists(Alert.objects.filter(host_id=OuterRef("host_id"), conn_uuid=OuterRef("conn_uuid"), rule_id=value)))


Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _addresses_in(column: str, net: Network) -> list[str]:
    """The stored addresses of ``column`` inside ``net``.

    Addresses are text (IPv6 in any compressed form), which neither SQLite nor a text
    column in PostgreSQL can test against a prefix; the distinct addresses are far fewer
    than the connections, so they are matched here and the filter becomes ``IN (...)``.
    """
    out = []
    for text in Connection.objects.exclude(**{f"{column}__isnull": True}).values_list(column, flat=True).distinct():
        try:
            if ipaddress.ip_address(text) in net:
                out.append(text)
        except ValueError:  # not an address (never written by the translators)
            continue
    return out


def _address(*columns: str) -> QFactory:
    """An address field: an exact address, a substring (~) or a CIDR prefix."""
    plain = compare(columns[0]) if len(columns) == 1 else either(*columns)

    def make(op: str, value: Any) -> Q:
        if not isinstance(value, ipaddress.IPv4Network | ipaddress.IPv6Network):
            return plain(op, value)
        q = Q()
        for column in columns:
            q |= Q(**{f"{column}__in": _addresses_in(column, value)})
        return ~q if op == "!=" else q

    return make


COLUMNS = Columns(
    {
        "host": compare("host_id"),
        "comm": compare("comm"),
        "pid": either("pid", "tgid"),
        "uid": compare("uid"),
        "src": _address("src"),
        "dst": _address("dst"),
        "addr": _address("src", "dst"),
        "sport": compare("sport"),
        "dport": compare("dport"),
        "port": either("sport", "dport"),
        "state": _state,
        "proto": compare("proto"),
        "duration": compare("duration_s"),
        "bytes": compare("total_bytes"),
        "retrans": compare("retransmits"),
        "resets": compare("resets"),
        "anomaly": _anomaly,
    }
)


@dataclass(frozen=True)
class SortKey:
    expr: Any  # a column name or an expression (annotated as "sort_key")
    numeric: bool


SORTS: dict[str, SortKey] = {
    "host": SortKey(F("host_id"), False),
    "proto": SortKey(F("proto"), False),
    "comm": SortKey(Coalesce("comm", Value(""), output_field=TextField()), False),
    "pid": SortKey(Coalesce("tgid", "pid", Value(-1), output_field=BigIntegerField()), True),
    "uid": SortKey(Coalesce("uid", Value(-1), output_field=BigIntegerField()), True),
    "local": SortKey(Coalesce("sport", Value(-1), output_field=BigIntegerField()), True),
    "remote": SortKey(Coalesce("dport", Value(-1), output_field=BigIntegerField()), True),
    "state": SortKey(Coalesce("state", Value(""), output_field=TextField()), False),
    "start": SortKey(F("first_seen"), True),
    "last": SortKey(F("last_seen"), True),
    "duration": SortKey(F("duration_s"), True),
    "bytes": SortKey(F("total_bytes"), True),
    "retrans": SortKey(F("retransmits"), True),
    "alerts": SortKey(F("alerts"), True),
}
# Most recent activity first: Connection's last_seen index serves it (and its keyset
# pages) without a sort -- on PostgreSQL its last_seen_bucket index and an incremental
# sort within the newest buckets (webapp/traces/recency.py); new connections land on top too.
DEFAULT_SORT = "-last"


# annotated()'s total_bytes as literal SQL (one table, no joins): the expression of the
# SQLite index nt_conn_bytes (migration 0030), for the Overview's top by bytes.
TOTAL_BYTES_SQL = "(COALESCE(bytes_orig, 0) + COALESCE(bytes_resp, 0))"


def annotated() -> QuerySet[Connection]:
    """Connections with the computed columns the filter language and sorts use."""
    return Connection.objects.annotate(
        duration_s=F("last_seen") - F("first_seen"),
        total_bytes=Coalesce("bytes_orig", Value(0), output_field=BigIntegerField())
        + Coalesce("bytes_resp", Value(0), output_field=BigIntegerField()),
    )


def filtered(text: str) -> QuerySet[Connection]:
    """Raises FilterError for a bad expression (also "no such rule" for ``anomaly K99``)."""
    return annotated().filter(to_q(parse(text, rules=selfhealth.known_rules()), COLUMNS))


# Text fields whose exact value may have been meant as a part of it (comm iperf -> iperf3).
_PARTIAL_COLUMNS = {"host": ("host_id",), "comm": ("comm",), "src": ("src",), "dst": ("dst",), "addr": ("src", "dst")}


def empty_result_hints(text: str) -> list[str]:
    """Why a filter found nothing, where a near miss exists: ``comm iperf`` matches no
    command exactly, but ``comm ~ iperf`` would match iperf3's connections."""
    hints = []
    for cond in conditions(parse(text)):
        columns = _PARTIAL_COLUMNS.get(cond.field)
        if cond.op != "=" or columns is None or not isinstance(cond.value, str):
            continue
        q = Q()
        for column in columns:
            q |= Q(**{f"{column}__icontains": cond.value})
        count = Connection.objects.filter(q).count()
        if count:
            quoted = f'"{cond.value}"' if " " in cond.value else cond.value
            kind = FIELD_BY_NAME[cond.field].name
            hints.append(
                f"no connection has {kind} exactly {cond.value!r}; {kind} ~ {quoted} (contains) matches {count:,}"
            )
    return hints


def encode_cursor(value: Any, pk: int) -> str:
    return base64.urlsafe_b64encode(json.dumps([value, pk]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str, numeric: bool) -> tuple[Any, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value, pk = json.loads(raw)
    except (ValueError, TypeError) as exc:
        raise FilterError("bad page cursor; start again from the first page", 0) from exc
    if (
        not isinstance(pk, int)
        or (numeric and not isinstance(value, int | float))
        or (not numeric and not isinstance(value, str))
    ):
        raise FilterError("bad page cursor; start again from the first page", 0)
    return value, pk


@dataclass(frozen=True)
class Page:
    rows: list[Connection]
    next: str | None
    total: int


def page(qs: QuerySet[Connection], sort: str, cursor: str | None, limit: int) -> Page:
    """One page of ``qs`` in ``sort`` order ("-bytes": descending) after ``cursor``."""
    descending = sort.startswith("-")
    key = SORTS.get(sort.lstrip("-"))
    if key is None:
        raise FilterError(f"unknown sort {sort!r}; sorts: {', '.join(SORTS)}", 0)
    total = qs.count()
    qs = qs.annotate(sort_key=key.expr)
    by_last_seen = sort.lstrip("-") == "last"  # PostgreSQL: through last_seen's bucket (recency.py)
    if cursor:
        value, pk = decode_cursor(cursor, key.numeric)
        # "key <= v and not (key = v and id >= pk)": the first term is an index range
        # when the key is an indexed column (last_seen), unlike the equivalent OR form.
        if descending:
            qs = qs.filter(Q(sort_key__lte=value) & ~Q(sort_key=value, id__gte=pk))
        else:
            qs = qs.filter(Q(sort_key__gte=value) & ~Q(sort_key=value, id__lte=pk))
        if by_last_seen:
            qs = recency.at_most(qs, value) if descending else recency.at_least(qs, value)
    order = ("-sort_key", "-id") if descending else ("sort_key", "id")
    qs = recency.ordered(qs, order) if by_last_seen else qs.order_by(*order)
    # Sort narrow (id, key) pairs, then load the page's rows: a top-N sort over all the
    # columns costs several times more when the key is not indexed.
    keys = list(qs.values_list("id", "sort_key")[: limit + 1])
    more = len(keys) > limit
    keys = keys[:limit]
    by_id = annotated().in_bulk([pk for pk, _ in keys])
    rows = [by_id[pk] for pk, _ in keys]
    nxt = encode_cursor(keys[-1][1], keys[-1][0]) if more and keys else None
    return Page(rows, nxt, total)


RuleKey = tuple[str, str]  # (host_id, conn_uuid): a connection is its host's


def alert_rules(conns: list[Connection]) -> dict[RuleKey, list[str]]:
    """Rule ids of the alerts naming each connection, on its own host (the anomaly column)."""
    wanted = {(c.host_id, c.conn_uuid) for c in conns}
    out: dict[RuleKey, list[str]] = {}
    rows = (
        Alert.objects.filter(conn_uuid__in=sorted({u for _, u in wanted}), host_id__in=sorted({h for h, _ in wanted}))
        .values_list("host_id", "conn_uuid", "rule_id")
        .distinct()
    )
    for host, uuid, rule in rows:
        if (host, uuid) in wanted:
            out.setdefault((host, uuid), []).append(rule)
    return {k: sorted(v) for k, v in out.items()}


def row_json(c: Connection, rules: dict[RuleKey, list[str]]) -> dict[str, Any]:
    return {
        "conn_uuid": c.conn_uuid,
        "host_id": c.host_id,
        "proto": c.proto,
        "comm": c.comm,
        "pid": c.tgid if c.tgid is not None else c.pid,
        "uid": c.uid,
        "src": c.src,
        "sport": c.sport,
        "dst": c.dst,
        "dport": c.dport,
        "state": c.state,
        "closed": c.closed,
        "start": c.first_seen,
        "last": c.last_seen,
        "duration": c.last_seen - c.first_seen,
        "bytes": (c.bytes_orig or 0) + (c.bytes_resp or 0),
        "bytes_orig": c.bytes_orig,
        "bytes_resp": c.bytes_resp,
        # The local socket's view: what this host sent (out) and received (in).
        "bytes_out": c.bytes_out,
        "bytes_in": c.bytes_in,
        "packets_out": c.packets_out,
        "packets_in": c.packets_in,
        "retrans": c.retransmits,
        "resets": c.resets,
        "alerts": c.alerts,
        "alert_rules": rules.get((c.host_id, c.conn_uuid), []),
        "anomaly": c.anomaly,
    }
