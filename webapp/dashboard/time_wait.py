"""TIME_WAIT by destination: the Overview's count of sockets in TIME_WAIT per host and
remote address:port (issue 18 item 3, the TIME_WAIT pile-up story).

The rows are exactly those the Connections filter ``state TIME_WAIT`` finds (queries.py:
the stored state, or TIME_WAIT entered within Linux's fixed 60 s), with nettrail's own
connections left out as the Connections page leaves them out by default. Counts are per
host, never summed across hosts, and each row carries the filter that lists its sockets
(``host H and state TIME_WAIT and dst X and dport Y``), so following it shows exactly
that many rows. Keep in sync with: queries._state, own_traffic.own_q, js/overview.js.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from django.db.models import BooleanField, Count, Q, QuerySet
from django.db.models.expressions import RawSQL

from webapp.dashboard import own_traffic, queries
from webapp.traces.models import Connection

LIMIT = 10  # destinations shown, most sockets first
_BARE = re.compile(r'[^\s()=!<>~"&|]+')  # a filter-language word that needs no quotes (filterlang._TOKEN)


def _value(text: str) -> str:
    return text if _BARE.fullmatch(text) else f'"{text}"'


def link_filter(host: str, dst: str, dport: int) -> str:
    """The Connections filter that lists one row's sockets."""
    return f"host {_value(host)} and state TIME_WAIT and dst {_value(dst)} and dport {dport}"


def _grouped(q: Q, hosts: Sequence[str]) -> QuerySet[Any]:
    """Sockets per (host_id, dst, dport) among the connections of ``q`` on ``hosts``."""
    return (
        Connection.objects.filter(q)
        .exclude(own_traffic.own_q())
        .filter(host_id__in=list(hosts), dst__isnull=False, dport__isnull=False)
        .values("host_id", "dst", "dport")
        .annotate(sockets=Count("*"))  # not Count("id"): no column to read, so an index alone answers
    )


def by_destination(hosts: Sequence[str], limit: int = LIMIT) -> list[dict[str, Any]]:
    """``[{host_id, dst, dport, sockets, q}]`` for ``hosts``, most sockets first.

    One grouped query over ``state TIME_WAIT``'s OR reads the whole table. Its rows are
    the stored TIME_WAIT ones (A: an index range of nt_conn_tw_dest, in group order) and
    the CLOSED ones that entered TIME_WAIT within 60 s (B: few, nt_conn_state_last). A
    destination outside A's top ``limit`` and without B rows has its A count alone, so it
    ranks after all of A's top ``limit``: the top is among those and B's destinations,
    which the filter's own query then counts and orders (B's window starts first, so it
    holds every row that query's does). Keep in sync with: queries.entered_time_wait."""
    if not hosts:
        return []
    order = ("-sockets", "host_id", "dst", "dport")
    entered = _grouped(Q(state="CLOSED") & queries.entered_time_wait(time.time() - queries.TIME_WAIT_S), hosts)
    keys = {(r["host_id"], r["dst"], r["dport"]) for r in entered.order_by()}
    # state = 'TIME_WAIT' written as a literal: SQLite cannot match a bound parameter to
    # the partial index's condition and reads every row instead (3 s against 50 ms at 1M rows)
    stored = Q(RawSQL(f"{Connection._meta.db_table}.state = 'TIME_WAIT'", [], output_field=BooleanField()))
    keys |= {(r["host_id"], r["dst"], r["dport"]) for r in _grouped(stored, hosts).order_by(*order)[:limit]}
    if not keys:
        return []
    rows = (
        queries.filtered("state TIME_WAIT")
        .exclude(own_traffic.own_q())
        # each column in its set of the candidates': more destinations than those (a cross
        # product) changes nothing, each is counted whole; one IN per column, an index range
        .filter(
            host_id__in=sorted({k[0] for k in keys}),
            dst__in=sorted({k[1] for k in keys}),
            dport__in=sorted({k[2] for k in keys}),
        )
        .values("host_id", "dst", "dport")
        .annotate(sockets=Count("id"))
        .order_by(*order)[:limit]
    )
    return [{**r, "q": link_filter(r["host_id"], r["dst"], r["dport"])} for r in rows]
