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
from collections.abc import Sequence
from typing import Any

from django.db.models import Count

from webapp.dashboard import own_traffic, queries

LIMIT = 10  # destinations shown, most sockets first
_BARE = re.compile(r'[^\s()=!<>~"&|]+')  # a filter-language word that needs no quotes (filterlang._TOKEN)


def _value(text: str) -> str:
    return text if _BARE.fullmatch(text) else f'"{text}"'


def link_filter(host: str, dst: str, dport: int) -> str:
    """The Connections filter that lists one row's sockets."""
    return f"host {_value(host)} and state TIME_WAIT and dst {_value(dst)} and dport {dport}"


def by_destination(hosts: Sequence[str], limit: int = LIMIT) -> list[dict[str, Any]]:
    """``[{host_id, dst, dport, sockets, q}]`` for ``hosts``, most sockets first."""
    if not hosts:
        return []
    rows = (
        queries.filtered("state TIME_WAIT")
        .exclude(own_traffic.own_q())
        .filter(host_id__in=list(hosts), dst__isnull=False, dport__isnull=False)
        .values("host_id", "dst", "dport")
        .annotate(sockets=Count("id"))
        .order_by("-sockets", "host_id", "dst", "dport")[:limit]
    )
    return [{**r, "q": link_filter(r["host_id"], r["dst"], r["dport"])} for r in rows]
