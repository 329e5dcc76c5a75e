"""What a page's numbers are short by: the loss reports that bear on it, per host.

A page counts records; a record lost on the way (the ring full, an event undecodable, a
run the kernel skipped, a counter evicted, the sink's spool full, a batch refused, a
collector killed with records in memory) is not
in its counts. The Status page lists every loss of a host; each data page also names, at
its top, those of its own record kinds and those of every kind, so a number read there
is known to be short, and by how much (issue 18: nothing lost silently). The store's own
removals are named too: what retention deleted from each table the page reads, and up to
when (webapp/traces/retention.py keeps that in Trimmed).
Keep in sync with: docs/collector.md "Where records can be lost", js/common.js (lossNote).
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db.models import Sum

from webapp.dashboard.tables import LossReport
from webapp.traces.models import KIND_MODELS, Connection, Trimmed

# the event types (the ring's kinds, or a map's) whose records each page counts
PAGE_KINDS: dict[str, frozenset[str]] = {
    "connections": frozenset({"tcp_state", "tcp_retransmit", "tcp_reset", "tcp_cong_state", "tcp_destroy",
                              "siftr_sample", "tcpdebug_snapshot", "flow_counters", "tcp_lifecycle"}),
    "buffers": frozenset({"skb_drop", "skb_stage"}),
    "udp": frozenset({"udp_datagram", "udp_fail"}),
    "counters": frozenset({"ip_packet", "ip_flow_counters", "ip_flow_packets"}),
}  # fmt: skip
# (probe, hook prefix) -> what the count is of, and why it was lost
WHY = (
    ("loss", "map/counters", "{kind} events lost: the ring buffer was full"),
    ("malformed", "decode", "{kind} events lost: they could not be decoded"),
    ("evicted", "map/", "{kind} lost: evicted from the kernel's map"),
    ("skipped", "prog/", "{kind} skipped by the kernel (their events neither recorded nor counted)"),
    ("loss", "sink/spool", "records of any kind lost: the collector's spool was full"),
    ("loss", "sink/rejected", "records of any kind refused by the server"),
    ("loss", "sink/killed", "records of any kind lost: a collector was killed (SIGKILL) holding them in memory"),
    ("loss", "writer/refused", "records of any kind accepted but not storable"),
)
ANY_KIND_HOOKS = ("sink/spool", "sink/rejected", "sink/killed", "writer/refused")
# the record kinds (tables) each page reads, for what retention removed from them; the
# loss reports' own table on every page: removed, they no longer count above
PAGE_TABLES: dict[str, tuple[str, ...]] = {
    "connections": ("connection", "tcp_state", "tcp_retransmit", "tcp_reset", "tcp_cong_state", "siftr_sample",
                    "tcpdebug_snapshot", "flow_counters", "tcp_segment", "skb_event", "skb_drop", "tcp_lifecycle"),
    "buffers": ("skb_event", "skb_drop", "drop_count"),
    "udp": ("udp_datagram", "sock_event"),
    "counters": ("ip_flow_counters", "stack_counter"),
}  # fmt: skip
RETENTION = "NETTRAIL_RETENTION_DAYS, NETTRAIL_RETENTION_ROWS"


def _why(probe: str, hook: str, kind: str) -> str:
    for p, prefix, text in WHY:
        if probe == p and hook.startswith(prefix):
            return text.format(kind=kind)
    return f"{kind} lost ({probe or 'no probe'}, {hook or 'no hook'})"


def _bears_on(page: str, probe: str, hook: str, kind: str) -> bool:
    if probe == "skipped" or hook in ANY_KIND_HOOKS:  # a skipped run may be of any provider's
        return True
    return kind in PAGE_KINDS[page]


# a loss is reported at the poll after it (0.1 s) or, for a sink, at its next batch: a
# connection's page counts those reported up to this long after its last record
REPORT_LAG_S = 5.0


def for_page(page: str, host: str | None, during: tuple[float, float] | None = None) -> list[dict[str, Any]]:
    """[{host_id, lost, what}] of the losses that make `page`'s counts short, largest first;
    `during` (first, last wall-clock seconds): only those reported meanwhile (a connection's
    page: what its host lost while it was open, some of which may be its own)."""
    qs = LossReport.objects.filter(lost__gt=0)
    if host:
        qs = qs.filter(host_id=host)
    if during is not None:
        qs = qs.filter(ts_wall__gte=during[0], ts_wall__lte=during[1] + REPORT_LAG_S)
    rows = qs.values("host_id", "probe", "hook", "event_type").annotate(n=Sum("lost"))
    out = []
    for r in rows:
        # a report may lack its probe or hook (any record's envelope fields are optional)
        probe, hook, kind = r["probe"] or "", r["hook"] or "", r["event_type"] or ""
        if _bears_on(page, probe, hook, kind):
            out.append({"host_id": r["host_id"], "lost": int(r["n"]), "what": _why(probe, hook, kind)})
    out += trimmed(page, during)
    return sorted(out, key=lambda r: (-r["lost"], r["host_id"], r["what"]))


def trimmed(page: str, during: tuple[float, float] | None = None) -> list[dict[str, Any]]:
    """What retention removed from the page's tables (every host's, and so perhaps these
    hosts'): with `during`, only where it reached the connection's opening."""
    tables = {KIND_MODELS[k]._meta.db_table: k for k in (*PAGE_TABLES[page], "loss_report")}
    if page == "connections":
        tables[Connection._meta.db_table] = "connection row"
    out = []
    for row in Trimmed.objects.filter(table__in=tables, rows__gt=0):
        if during is not None and (row.newest is None or row.newest < during[0]):
            continue  # removed before the connection opened: none of its records
        up_to = "" if row.newest is None else f", up to {_utc(row.newest)}"
        what = f"{tables[row.table]} records removed by retention{up_to} ({RETENTION})"
        out.append({"host_id": "every host", "lost": row.rows, "what": what})
    return out


def _utc(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, tz=datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
