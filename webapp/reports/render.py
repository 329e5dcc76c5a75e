"""Trace reports: stored records streamed through the xo Writer, in any xo style.

Shape (docs/reports.md, docs/schema/report.schema.json, docs/schema/report.xsd):
container ``nettrail-report`` = container ``header`` (filter, hosts, providers, kinds,
loss, drops, thresholds used), list ``connection`` (one instance per Connection row,
then one list per record kind holding that connection's records in kernel-time
order; text and HTML merge the kinds into one time-ordered lifecycle), container ``unattributed`` (records of no connection: loss reports, drop
counts, alerts and drops not tied to a socket).

Everything is read with ``.iterator(chunk_size=...)`` and rendered as it arrives:
memory stays bounded by one chunk, whatever the report size. ``report_steps`` is a
generator that yields after every record, so an HTTP response can hand out the
output in chunks while the report is being written.
Keep in sync with: analysis/export/filters.py (ReportFilter), analysis/export/schema.py
(the schemas are generated from the same names), webapp/traces/models.py.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterator
from typing import Any

import msgspec
from django.db.models import Count, Max, Min, QuerySet, Sum

from analysis.export.filters import CONNECTIONLESS, FilterError, ReportFilter
from analysis.export.schema import CONNECTION_FIELDS, list_name
from translators.records import BY_KIND, Record, describe
from webapp.traces.models import KIND_MODELS, Connection, Host, RecordModel
from xo import Writer, human

CHUNK = 2000
REPORT = "nettrail-report"
# Never in a report: raw frames belong in the pcap export, and would bloat every style.
OMITTED_FIELDS = frozenset({"frame_bytes"})


class ReportNotFound(LookupError):
    """The filter names a connection or host the database does not know (HTTP 404, exit 1)."""


def check(f: ReportFilter) -> None:
    """Raises ReportNotFound (or the DatabaseError of an unset database) before any output."""
    Host.objects.exists()  # fails now, not after half a header, when the tables are missing
    if f.connection is not None:
        hosts = _connection_hosts(f)
        if not hosts:
            raise ReportNotFound(f"unknown connection {f.connection}")
        if len(hosts) > 1:
            raise FilterError(f"connection {f.connection} exists on hosts {', '.join(hosts)}: name one with host")
    for host in f.hosts:
        known = Host.objects.filter(name=host).exists() or Connection.objects.filter(host_id=host).exists()
        if not known:
            raise ReportNotFound(f"unknown host {host}")


def write_report(w: Writer, f: ReportFilter, chunk_size: int = CHUNK) -> int:
    """Writes the whole report; returns the number of records rendered."""
    count = 0
    for _ in report_steps(w, f, chunk_size):
        count += 1
    return count


def report_steps(w: Writer, f: ReportFilter, chunk_size: int = CHUNK) -> Iterator[None]:
    """Renders the report, yielding after each record (pull-style streaming)."""
    w.open_container(REPORT)
    present = write_header(w, f)
    # Only kinds with records in scope: saves one query per connection and empty kind.
    kinds = [k for k in f.connection_kinds() if k in present]
    w.open_list("connection")
    for conn in connections(f).iterator(chunk_size=chunk_size):
        w.open_instance("connection")
        _emit_connection(w, conn)
        yield from _lifecycle(w, f, conn.host_id, conn.conn_uuid, kinds, chunk_size)
        w.close_instance("connection")
    w.close_list("connection")
    if f.connection is None:
        w.open_container("unattributed")
        for kind in f.kinds:
            if kind in present:
                yield from _records(w, records_of(kind, f, conn_uuid=None), kind, chunk_size)
        w.close_container("unattributed")
    w.close_container(REPORT)
    w.finish()


# --- queries ---------------------------------------------------------------------------------------


def connections(f: ReportFilter) -> QuerySet[Connection]:
    qs = Connection.objects.all()
    if f.connection is not None:
        qs = qs.filter(conn_uuid=f.connection)
    if f.hosts:
        qs = qs.filter(host_id__in=f.hosts)
    if f.since is not None:
        qs = qs.filter(last_seen__gte=f.since)
    if f.until is not None:
        qs = qs.filter(first_seen__lte=f.until)
    return qs.order_by("first_seen", "id")


def _in_range(qs: QuerySet[Any], f: ReportFilter) -> QuerySet[Any]:
    if f.since is not None:
        qs = qs.filter(ts_wall__gte=f.since)
    if f.until is not None:
        qs = qs.filter(ts_wall__lte=f.until)
    return qs


def scoped(kind: str, f: ReportFilter) -> QuerySet[RecordModel]:
    """Records of a kind within the filter's hosts, connection and time range."""
    qs: QuerySet[RecordModel] = KIND_MODELS[kind].objects.all()
    if f.connection is not None:  # a connection's records are its host's (owner.py)
        qs = qs.filter(conn_uuid=f.connection, host_id__in=_connection_hosts(f))
    elif f.hosts:
        qs = qs.filter(host_id__in=f.hosts)
    return _in_range(qs, f)


def _connection_hosts(f: ReportFilter) -> list[str]:
    """The hosts that have the filter's connection (within its hosts, when it names some)."""
    qs = Connection.objects.filter(conn_uuid=f.connection)
    if f.hosts:
        qs = qs.filter(host_id__in=f.hosts)
    return sorted(qs.values_list("host_id", flat=True))


def records_of(kind: str, f: ReportFilter, *, conn_uuid: str | None, host: str | None = None) -> QuerySet[RecordModel]:
    """One connection's records of a kind (index conn_uuid, ts_ns; on its host), or the unattributed ones."""
    qs: QuerySet[RecordModel] = KIND_MODELS[kind].objects.all()
    if conn_uuid is not None:
        return _in_range(qs.filter(conn_uuid=conn_uuid, host_id=host), f).order_by("ts_ns", "seq")
    if kind not in CONNECTIONLESS:
        qs = qs.filter(conn_uuid__isnull=True)
    if f.hosts:
        qs = qs.filter(host_id__in=f.hosts)
    return _in_range(qs, f).order_by("ts_wall", "seq")


def as_records(
    qs: QuerySet[RecordModel], kind: str, chunk_size: int = CHUNK, omit: frozenset[str] = OMITTED_FIELDS
) -> Iterator[Record]:
    """Rows back into record Structs, one chunk in memory at a time."""
    cls = BY_KIND[kind]
    names = [d.name for d in describe(cls) if d.name not in omit]
    for row in qs.values_list(*names).iterator(chunk_size=chunk_size):
        yield msgspec.convert(dict(zip(names, row, strict=True)), cls)


def _lifecycle(
    w: Writer, f: ReportFilter, host: str, conn_uuid: str, kinds: list[str], chunk_size: int
) -> Iterator[None]:
    """One connection's records. Encoding styles: one list per kind (the schemas' shape).
    Text and HTML: every kind merged in kernel-time order, the way a person reads a
    lifecycle; one open cursor per kind, so memory stays one chunk per kind."""
    if w.options.style in ("json", "xml"):
        for kind in kinds:
            yield from _records(w, records_of(kind, f, conn_uuid=conn_uuid, host=host), kind, chunk_size)
        return
    streams = [as_records(records_of(kind, f, conn_uuid=conn_uuid, host=host), kind, chunk_size) for kind in kinds]
    for rec in heapq.merge(*streams, key=lambda r: (r.ts_ns, r.seq)):
        w.record(rec, name=list_name(rec.kind))
        yield None


def _records(w: Writer, qs: QuerySet[RecordModel], kind: str, chunk_size: int) -> Iterator[None]:
    for rec in as_records(qs, kind, chunk_size):
        w.record(rec, name=list_name(kind))
        yield None


# --- header ----------------------------------------------------------------------------------------


def write_header(w: Writer, f: ReportFilter) -> set[str]:
    """Writes the header; returns the kinds that have records in scope."""
    w.open_container("header")
    w.emit("{T:nettrail trace report} {Lwc:generated}{:generated-at/%.6f}\n", generated_at=time.time())
    _emit_filter(w, f)
    _emit_hosts(w, f)
    present = _emit_kinds(w, f)
    _emit_loss(w, f)
    _emit_drops(w, f)
    _emit_thresholds(w, f)
    w.close_container("header")
    return present


def _emit_filter(w: Writer, f: ReportFilter) -> None:
    w.open_container("filter")
    if f.since is not None:
        w.emit("{Lwc:since}{:since/%.6f}\n", since=f.since)
    if f.until is not None:
        w.emit("{Lwc:until}{:until/%.6f}\n", until=f.until)
    if f.connection is not None:
        w.emit("{Lwc:connection}{:connection/%s}\n", connection=f.connection)
    for host in f.hosts:
        w.emit("{Lwc:host}{l:host/%s}\n", host=host)
    w.emit("{Lwc:kinds}{:kinds/%s}\n", kinds=",".join(f.kinds))
    w.close_container("filter")


def _host_names(f: ReportFilter) -> list[str]:
    if f.connection is not None:
        return _connection_hosts(f)
    if f.hosts:
        return list(f.hosts)
    names = set(Host.objects.values_list("name", flat=True))
    names.update(Connection.objects.values_list("host_id", flat=True).distinct())
    return sorted(names)


def _emit_hosts(w: Writer, f: ReportFilter) -> None:
    w.open_list("host")
    for name in _host_names(f):
        agg = (
            connections(f).filter(host_id=name).aggregate(n=Count("id"), first=Min("first_seen"), last=Max("last_seen"))
        )
        w.open_instance("host")
        w.emit("{Lwc:host}{k:name/%s} {Lw:connections}{:connections/%d}", name=name, connections=agg["n"])
        if agg["first"] is not None:
            w.emit(
                " {Lw:from}{:first-seen/%.6f} {Lw:to}{:last-seen/%.6f}", first_seen=agg["first"], last_seen=agg["last"]
            )
        w.emit("\n")
        w.close_instance("host")
    w.close_list("host")


def _emit_kinds(w: Writer, f: ReportFilter) -> set[str]:
    """Record counts per kind and per provider (the providers that contributed)."""
    providers: dict[str, int] = {}
    present: set[str] = set()
    w.open_list("kind")
    for kind in f.kinds:
        rows = scoped(kind, f).values_list("provider").annotate(n=Count("id")).order_by()
        total = 0
        for provider, n in rows:
            providers[provider] = providers.get(provider, 0) + n
            total += n
        if total:
            present.add(kind)
            w.open_instance("kind")
            w.emit("{Lwc:kind}{k:name/%s} {Lw:records}{:records/%d}\n", name=kind, records=total)
            w.close_instance("kind")
    w.close_list("kind")
    w.open_list("provider")
    for name in sorted(providers):
        w.open_instance("provider")
        w.emit("{Lwc:provider}{k:name/%s} {Lw:records}{:records/%d}\n", name=name, records=providers[name])
        w.close_instance("provider")
    w.close_list("provider")
    return present


def _emit_loss(w: Writer, f: ReportFilter) -> None:
    """Collector blind spots: LossReport.lost summed per host and event type."""
    qs = KIND_MODELS["loss_report"].objects.all()
    if f.hosts or f.connection is not None:
        qs = qs.filter(host_id__in=_host_names(f))
    rows = (
        _in_range(qs, f)
        .values_list("host_id", "event_type")
        .annotate(lost=Sum("lost"))
        .order_by("host_id", "event_type")
    )
    w.open_container("loss")
    total = 0
    w.open_list("event")
    for host, event_type, lost in rows:
        total += lost
        w.open_instance("event")
        w.emit("{Lwc:lost}{k:host/%s} {k:event-type/%s} {:lost/%d}\n", host=host, event_type=event_type, lost=lost)
        w.close_instance("event")
    w.close_list("event")
    w.emit("{Lwc:lost total}{:lost-total/%d}\n", lost_total=total)
    w.close_container("loss")


def _emit_drops(w: Writer, f: ReportFilter) -> None:
    """skb drops in scope per kernel reason."""
    rows = (
        scoped("skb_drop", f).values_list("drop_reason_str").annotate(n=Count("id")).order_by("-n", "drop_reason_str")
    )
    w.open_list("drop")
    for reason, n in rows:
        w.open_instance("drop")
        w.emit("{Lwc:dropped}{k:reason/%s} {:drops/%d}\n", reason=reason, drops=n)
        w.close_instance("drop")
    w.close_list("drop")


def _emit_thresholds(w: Writer, f: ReportFilter) -> None:
    """The thresholds in force when the reported alerts fired, per rule."""
    seen: dict[str, dict[str, Any]] = {}
    for rule_id, thresholds in scoped("alert", f).values_list("rule_id", "thresholds").order_by("rule_id").distinct():
        seen.setdefault(rule_id, {}).update(thresholds or {})
    w.open_list("rule")
    for rule_id, values in seen.items():
        w.open_instance("rule")
        w.emit("{Lwc:thresholds}{k:rule-id/%s}", rule_id=rule_id)
        w.open_list("threshold")
        for name in sorted(values):
            w.open_instance("threshold")
            w.emit(" {k:name/%s}={:value/" + _value_format(values[name]) + "}", name=name, value=values[name])
            w.close_instance("threshold")
        w.close_list("threshold")
        w.emit("\n")
        w.close_instance("rule")
    w.close_list("rule")


def _value_format(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "%s"
    return "%d" if isinstance(value, int) else "%g"


# --- connections -------------------------------------------------------------------------------------


def _emit_connection(w: Writer, conn: Connection) -> None:
    if w.options.style == "text":
        w.emit("{d:connection/%s}\n", connection=connection_lines(conn, w.options.no_humanize))
        return
    parts = ["{Lwc:connection}{k:conn-uuid/%s}"]
    values: dict[str, Any] = {"conn_uuid": conn.conn_uuid}
    for name, fmt, _ in CONNECTION_FIELDS:
        value = getattr(conn, name)
        if value is None:
            continue  # the encodings leave unknown values out (providers.md 0.2)
        xo = name.replace("_", "-")
        mods = "n" if isinstance(value, bool) else ""  # bare true/false in JSON
        parts.append(f" {{Lw:{xo}}}{{{mods}:{xo}/{fmt}}}")
        values[name] = str(value).lower() if isinstance(value, bool) else value
    w.emit("".join(parts) + "\n", **values)


def connection_lines(conn: Connection, raw: bool = False) -> str:
    """A connection's header in the text style, for people (issue 17 item 2): who, where,
    when and how much on three lines, like the rest of the text style (the encodings keep
    their fields, _emit_connection). `raw` (no-humanize): epoch seconds and plain counts."""

    def when(ts: float) -> str:
        return f"{ts:.6f}" if raw else human.iso_time(ts)

    def size(n: int) -> str:
        return f"{n} B" if raw else human.byte_count(n)

    def flow(host: str | None, port: int | None) -> str:
        h = host or "*"
        return f"{f'[{h}]' if ':' in h else h}:{'*' if port is None else port}"

    head = f"connection {conn.conn_uuid}  host {conn.host_id}" + (f"  boot {conn.boot_id}" if conn.boot_id else "")
    where = [f"{conn.proto} {flow(conn.src, conn.sport)} -> {flow(conn.dst, conn.dport)}"]
    if conn.state:
        where.append(conn.state + (" (closed)" if conn.closed and conn.state != "CLOSED" else ""))
    if conn.first_seen is not None:
        span = f"from {when(conn.first_seen)}"
        if conn.last_seen is not None:
            took = conn.last_seen - conn.first_seen
            span += f" to {when(conn.last_seen)} ({f'{took:.6f} s' if raw else human.duration(took)})"
        where.append(span)
    amounts = []
    for label, nbytes, packets in (("out", conn.bytes_out, conn.packets_out), ("in", conn.bytes_in, conn.packets_in)):
        if nbytes is not None or packets is not None:
            text = size(nbytes) if nbytes is not None else "?"
            amounts.append(f"{label} {text}" + (f" in {packets} packets" if packets is not None else ""))
    if not amounts:  # captures: by originator and responder
        for label, nbytes in (("orig", conn.bytes_orig), ("resp", conn.bytes_resp)):
            if nbytes is not None:
                amounts.append(f"{label} {size(nbytes)}")
    for label, value in (("retransmits", conn.retransmits), ("resets", conn.resets), ("alerts", conn.alerts)):
        if value is not None:
            amounts.append(f"{label} {value}")
    if conn.srtt_us is not None:
        amounts.append(f"srtt {conn.srtt_us} us" if raw else f"srtt {human.duration(conn.srtt_us / 1e6)}")
    if conn.snd_cwnd is not None:
        amounts.append(f"cwnd {size(conn.snd_cwnd)}")
    if conn.comm is not None or conn.pid is not None:
        amounts.append(f"process {conn.comm or ''}{f'[{conn.pid}]' if conn.pid is not None else ''}")
    lines = [head, "    " + "  ".join(where)]
    if amounts:
        lines.append("    " + "  ".join(amounts))
    return "\n".join(lines)


def count_in_scope(f: ReportFilter) -> int:
    """Records the filter covers (for the download endpoints' headers and tests)."""
    return sum(scoped(kind, f).count() for kind in f.kinds)
