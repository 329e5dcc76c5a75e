"""Uploaded captures in the dashboard: the Captures page's data and the Zeek states of
connections that have no kernel state.

An upload (webapp/api/upload.py) is stored under a host named ``capture:`` + the file's
name. Its connections have no ``tcp_state`` records, only the summaries' Zeek
``conn_state`` and ``history``: ``zeek_states`` gives those to the rows whose State would
otherwise be "–" (issue 18 item 5). ``capture`` is the result page: the capture's
connections with their states, its alerts (every rule ``nettrail analyze`` reports on
the same file: analysis/capture/rule_records.py) and a place for per-connection findings.
Keep in sync with: templates/dashboard/captures.html, api.connections, js/connections.js.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max

from webapp.dashboard import alert_versions
from webapp.dashboard.tables import Alert, ConnectionSummary
from webapp.traces.models import Connection, Host
from webapp.traces.tokens import CAPTURE_PREFIX

MAX_CONNECTIONS = 1000  # rows on a capture's result page (the Connections page has them all)


def is_capture(host: str) -> bool:
    return host.startswith(CAPTURE_PREFIX)


def zeek_states(rows: list[Connection]) -> dict[tuple[str, str], dict[str, Any]]:
    """(host, uuid) -> {conn_state, history, findings, direction_guessed} from the newest summary, for the rows given."""
    if not rows:
        return {}
    hosts = {c.host_id for c in rows}
    uuids = {c.conn_uuid for c in rows}
    found: dict[tuple[str, str], dict[str, Any]] = {}
    summaries = (
        ConnectionSummary.objects.filter(host_id__in=hosts, conn_uuid__in=uuids)
        .order_by("ts_ns")
        .values_list("host_id", "conn_uuid", "conn_state", "history", "findings", "direction_guessed")
    )
    for host, uuid, conn_state, history, findings, guessed in summaries:  # the newest summary last, so it wins
        found[(host, uuid)] = {
            "conn_state": conn_state, "history": history, "findings": findings or [], "direction_guessed": bool(guessed),
        }  # fmt: skip
    return found


def uploaded() -> list[dict[str, Any]]:
    """Every uploaded capture, newest first, with its connection count."""
    names = list(Host.objects.filter(name__startswith=CAPTURE_PREFIX).values_list("name", flat=True))
    counts = dict(
        Connection.objects.filter(host_id__in=names)
        .values("host_id")
        .annotate(n=Count("id"))
        .values_list("host_id", "n")
    )
    newest = dict(
        Connection.objects.filter(host_id__in=names)
        .values("host_id")
        .annotate(t=Max("last_seen"))
        .values_list("host_id", "t")
    )
    rows = [{"host": n, "name": n.removeprefix(CAPTURE_PREFIX), "connections": counts.get(n, 0)} for n in names]
    return sorted(rows, key=lambda r: -(newest.get(r["host"]) or 0))


def capture(host: str) -> dict[str, Any]:
    """A capture's connections (with Zeek conn_state/history) and its alerts."""
    conns = list(Connection.objects.filter(host_id=host).order_by("first_seen", "id")[:MAX_CONNECTIONS])
    states = zeek_states(conns)
    rows = []
    for c in conns:
        zeek = states.get((c.host_id, c.conn_uuid), {})
        rows.append(
            {
                "uuid": c.conn_uuid,
                "proto": c.proto,
                "src": c.src,
                "sport": c.sport,
                "dst": c.dst,
                "dport": c.dport,
                "conn_state": zeek.get("conn_state") or c.state,
                "history": zeek.get("history"),
                "bytes_orig": c.bytes_orig,
                "bytes_resp": c.bytes_resp,
                "start": c.first_seen,
                "duration": c.last_seen - c.first_seen,
                "retrans": c.retransmits,
                "alerts": c.alerts,
                "findings": zeek.get("findings", []),  # analysis/flows/findings.py, worst first
                # no SYN seen: which end opened it is a guess (the higher port's, or the SYN-ACK's peer)
                "direction_guessed": zeek.get("direction_guessed", False),
            }
        )
    cols = ("id", "rule_id", "severity", "status", "count", "message", "conn_uuid", "src", "dst", "dport")
    alerts = list(alert_versions.latest(Alert.objects.filter(host_id=host)).order_by("rule_id", "id").values(*cols))
    return {
        "host": host,
        "name": host.removeprefix(CAPTURE_PREFIX),
        "total": Connection.objects.filter(host_id=host).count(),
        "connections": rows,
        "alerts": alerts,
        "rules": sorted({a["rule_id"] for a in alerts}),
    }
