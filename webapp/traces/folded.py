"""tcp --tcp-fold in the webapp: a stored ``tcp_lifecycle`` read as the records the socket
streams without the fold (translators/tcp_lifecycle.py, expand()).

A folded socket's state changes, congestion change, flow counters and end summary arrive
as one record; the Connection fold (lifecycle.py) and the connection page's timeline
(webapp/dashboard/detail.py) read it expanded, so a connection shows the same lifecycle,
counters and duration whether its records were folded or streamed (docs/record-path.md,
step 2; tests/test_webapp_tcp_fold.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from translators.records import Record, TcpLifecycle, TcpStateChange
from translators.tcp_lifecycle import expand
from webapp.traces.models import KIND_MODELS

_FIELDS = tuple(f.name for f in msgspec.structs.fields(TcpLifecycle))


def parts(rec: Any) -> list[Record]:
    """The streamed records a lifecycle stands for, each given the lifecycle's seq (the
    record that carried it), in the order the socket streams them."""
    out = expand(rec)
    for part in out:
        part.seq = rec.seq
    return out


def stored(host_id: str, conn_uuid: str) -> list[TcpLifecycle]:
    """A connection's stored lifecycles as records, oldest first."""
    rows = KIND_MODELS["tcp_lifecycle"].objects.filter(host_id=host_id, conn_uuid=conn_uuid).order_by("ts_ns", "seq")
    return [TcpLifecycle(**{name: getattr(row, name) for name in _FIELDS}) for row in rows]


def state_changes(host_id: str, conn_uuid: str) -> list[TcpStateChange]:
    """The tcp_state records a connection's stored lifecycles stand for, oldest first."""
    return [p for rec in stored(host_id, conn_uuid) for p in parts(rec) if isinstance(p, TcpStateChange)]
