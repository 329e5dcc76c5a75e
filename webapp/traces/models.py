"""Storage: one table per record kind (generated), plus hosts, ingest tokens and connections.

Record tables: for every kind in ``translators.records.RECORD_TYPES`` a model whose
columns are exactly the record's fields (see ``schema.py``), named after the record
class (the ``connection`` kind's summary table is ``ConnectionSummary``, because
``Connection`` is the one-row-per-connection lifecycle table below). Look models up
by kind with ``KIND_MODELS[kind]``. Host identity in record tables is the record's
``host_id`` text (= ``Host.name``), so ingest needs no join and records of a host
removed from the Host table are still readable.
Keep in sync with: translators/records.py (regenerate migrations after a schema change),
webapp/traces/lifecycle.py (fills Connection), docs/webapp.md.
"""

from __future__ import annotations

from typing import Any

from django.db import models

from translators.records import RECORD_TYPES, Record, describe
from webapp.traces.schema import kind_of, model_field, record_constraints, record_indexes

TOKEN_PREFIX_LENGTH = 12  # characters of the raw token kept in clear to find its row
MAX_NAME_LENGTH = 255


class Host(models.Model):
    """A collector (or an imported capture): the unit ingest tokens are bound to."""

    name = models.CharField(max_length=MAX_NAME_LENGTH, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(null=True, blank=True)
    # What the dashboard asks this host's collector to trace (translators/tracing_request.py),
    # answered with every ingest: providers comma-separated ("": the collector's own choice),
    # skb_sample (None: the collector's own). Set by staff only (webapp/dashboard/tracing.py).
    tracing_providers = models.CharField(max_length=200, blank=True, default="")
    tracing_skb_sample = models.PositiveIntegerField(null=True, blank=True)
    # skb-lifecycle's windows: "OPEN/EVERY", "0" all the time, "" the collector's own
    tracing_skb_window = models.CharField(max_length=32, blank=True, default="")
    tracing_set_by = models.CharField(max_length=150, blank=True, default="")
    tracing_set_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return str(self.name)


class IngestToken(models.Model):
    """A per-host bearer token. Only its sha256 is stored; the raw token is shown once."""

    host = models.ForeignKey(Host, on_delete=models.CASCADE, related_name="tokens")
    prefix = models.CharField(max_length=TOKEN_PREFIX_LENGTH)
    digest = models.CharField(max_length=64, unique=True)  # hex sha256 of the raw token
    label = models.CharField(max_length=100, blank=True, default="")
    created = models.DateTimeField(auto_now_add=True)
    last_used = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            # Ingest authentication: find the token row by the prefix of the presented token.
            models.Index(fields=["prefix"], name="nt_token_prefix"),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.host.name})"


class RecordModel(models.Model):
    """Base of the generated record tables; ``kind`` names the record kind stored."""

    kind: str = ""
    record_type: type[Record]

    class Meta:
        abstract = True


def _record_model(cls: type[Record]) -> type[RecordModel]:
    kind = kind_of(cls)
    name = "ConnectionSummary" if kind == "connection" else cls.__name__
    attrs: dict[str, Any] = {"__module__": __name__, "kind": kind, "record_type": cls}
    for desc in describe(cls):
        attrs[desc.name] = model_field(desc)
    meta = {
        "indexes": record_indexes(cls),
        "constraints": record_constraints(cls),
    }
    attrs["Meta"] = type("Meta", (), meta)
    attrs["__doc__"] = f"Stored `{kind}` records: {cls.__doc__}"
    return type(name, (RecordModel,), attrs)


KIND_MODELS: dict[str, type[RecordModel]] = {kind_of(cls): _record_model(cls) for cls in RECORD_TYPES}
for _model in KIND_MODELS.values():
    globals()[_model.__name__] = _model  # importable by name: from webapp.traces.models import SkbDrop


class Connection(models.Model):
    """One row per (host, connection UUID), updated as its records arrive (lifecycle.py).

    A connection belongs to exactly one host; every lookup names the host as well
    (webapp/traces/owner.py). anomaly: an alert named the connection, or it was reset.
    """

    host_id = models.TextField()
    boot_id = models.TextField()
    conn_uuid = models.TextField()
    proto = models.TextField(default="tcp")
    ip_ver = models.IntegerField(null=True)
    src = models.TextField(null=True)
    sport = models.IntegerField(null=True)
    dst = models.TextField(null=True)
    dport = models.IntegerField(null=True)
    state = models.TextField(null=True)
    state_ts_ns = models.BigIntegerField(null=True)  # ts_ns of the record that set `state`
    first_seen = models.FloatField()  # wall clock, seconds since the epoch
    last_seen = models.FloatField()
    bytes_orig = models.BigIntegerField(null=True)
    bytes_resp = models.BigIntegerField(null=True)
    bytes_acked = models.BigIntegerField(null=True)
    bytes_received = models.BigIntegerField(null=True)
    # The local socket's own view (this host sent = out), whichever side opened it: the
    # kernel's flow_counters totals. A capture has no local socket: there they are the
    # originator's (out = orig), from its connection summaries.
    bytes_out = models.BigIntegerField(null=True)
    bytes_in = models.BigIntegerField(null=True)
    packets_out = models.BigIntegerField(null=True)
    packets_in = models.BigIntegerField(null=True)
    retransmits = models.IntegerField(default=0)  # tcp_retransmit records, or the summary's total
    resets = models.IntegerField(default=0)
    alerts = models.IntegerField(default=0)
    anomaly = models.BooleanField(default=False)
    srtt_us = models.BigIntegerField(null=True)  # latest SIFTR sample
    snd_cwnd = models.BigIntegerField(null=True)
    pid = models.IntegerField(null=True)
    tgid = models.IntegerField(null=True)
    comm = models.TextField(null=True)
    uid = models.BigIntegerField(null=True)
    closed = models.BooleanField(default=False)
    # This host opened the connection (a tcp_state record's `active`); None: not known.
    # Maps the local side's flow_counters bytes to originator/responder.
    active = models.BooleanField(null=True)
    # Zeek conn_state and history of the connection summary (captures, and live
    # connections: analysis/flows/live_summary.py in the collector); None until it comes.
    conn_state = models.TextField(null=True)
    history = models.TextField(null=True)

    class Meta:
        constraints = [
            # One row per connection of a host: the fold's key. Its index serves "connection
            # U of host H"; the conn_uuid index below serves "connection U" (any host).
            models.UniqueConstraint(fields=["host_id", "conn_uuid"], name="nt_conn_host_uuid"),
        ]
        # On PostgreSQL each index below naming last_seen names last_seen_bucket instead, a
        # coarse copy of it, so that the writer's updates of last_seen stay HOT (same names;
        # migration 0016, webapp/traces/recency.py); SQLite keeps them as written here.
        indexes = [
            # "Connection U": the detail page and API, then checked against the host.
            models.Index(fields=["conn_uuid"], name="nt_conn_uuid"),
            # Connection list: host H's connections by recent activity (cursor on last_seen).
            models.Index(fields=["host_id", "last_seen"], name="nt_conn_host_last"),
            # Filters "by process": comm X / pid N, newest first.
            models.Index(fields=["comm", "last_seen"], name="nt_conn_comm_last"),
            models.Index(fields=["pid", "last_seen"], name="nt_conn_pid_last"),
            # Filters by port and address, either side (/api/connections?port=P|addr=A runs
            # one branch per side, newest first: `WHERE sport = P ORDER BY last_seen DESC`,
            # keyset on last_seen; the dashboard's sport/dport/port/src/dst/addr filters).
            models.Index(fields=["sport", "last_seen"], name="nt_conn_sport_last"),
            models.Index(fields=["dport", "last_seen"], name="nt_conn_dport_last"),
            models.Index(fields=["src", "last_seen"], name="nt_conn_src_last"),
            models.Index(fields=["dst", "last_seen"], name="nt_conn_dst_last"),
            # Sorting by opening time (dashboard sort "start") and ?until= (first_seen <= T).
            models.Index(fields=["first_seen"], name="nt_conn_first"),
            # "Connections with anomalies" view and the state filter.
            models.Index(fields=["anomaly", "last_seen"], name="nt_conn_anomaly_last"),
            models.Index(fields=["state", "last_seen"], name="nt_conn_state_last"),
            # Retention trim: oldest connections first.
            models.Index(fields=["last_seen"], name="nt_conn_last"),
            # Overview: open connections per host (`WHERE host_id IN (...) AND NOT closed GROUP
            # BY host_id`, dashboard/overview_counts.py). Partial: a long history's closed rows
            # stay out; `closed` changes once per connection, so the writer's updates stay HOT.
            models.Index(fields=["host_id"], condition=models.Q(closed=False), name="nt_conn_open"),
            # Overview: top 10 by retransmissions (`WHERE retransmits > 0 ORDER BY retransmits
            # DESC LIMIT 10`, api.overview). Partial: connections without any stay out.
            models.Index(fields=["retransmits"], condition=models.Q(retransmits__gt=0), name="nt_conn_retrans"),
            # Connections filter `host H and retrans > 0`: its count from the index alone (PostgreSQL
            # read every retransmitting row's page for it, 0.4-1 s at a million connections).
            # retransmits is in nt_conn_retrans already, so no update that was HOT stops being.
            # PostgreSQL only (migration 0041): SQLite would sort the page by it instead of
            # walking nt_conn_host_last.
            models.Index(fields=["host_id"], condition=models.Q(retransmits__gt=0), name="nt_conn_retrans_host"),
            # Overview's TIME_WAIT table: sockets stored TIME_WAIT per host and destination
            # (`WHERE state = 'TIME_WAIT' AND host_id IN (...) GROUP BY host_id, dst, dport`,
            # dashboard/time_wait.py), read in group order from the index alone. Partial: only
            # TIME_WAIT rows, so no other state's query is drawn to it.
            models.Index(
                fields=["host_id", "dst", "dport"], condition=models.Q(state="TIME_WAIT"), name="nt_conn_tw_dest"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.src}:{self.sport} -> {self.dst}:{self.dport} ({self.state})"


class Trimmed(models.Model):
    """What retention (retention.py) removed from one table: its rows and the newest wall
    time among them, so a page can say its records of that kind start after it (nothing
    is removed without a word)."""

    table = models.CharField(max_length=100, unique=True)  # the db_table
    rows = models.BigIntegerField(default=0)  # removed since the database was made
    newest = models.FloatField(null=True)  # wall clock: records at or before it may be gone
    updated = models.FloatField(default=0.0)  # when retention last removed any

    def __str__(self) -> str:
        return f"{self.table}: {self.rows} rows trimmed, up to {self.newest}"


# --- drop summaries: the buffers page's counts, kept by ingest (webapp/traces/drop_summary.py) ---
# Each counts the stored skb_drop rows of one key (added by the store hook, taken away
# by retention), so the page reads a few rows instead of every drop. A NULL of the key
# is stored as "" / 0 with its bit set in `nulls` (a unique key never matches NULL).


class DropByLocation(models.Model):
    """skb_drop rows per host, reason and kernel location."""

    host_id = models.TextField()
    drop_reason_str = models.TextField()
    drop_location = models.TextField()
    nulls = models.SmallIntegerField(default=0)  # bit 1: reason NULL, 2: location NULL
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["host_id", "drop_reason_str", "drop_location", "nulls"], name="nt_dropsum_loc_key"
            )
        ]


class DropByProcess(models.Model):
    """skb_drop rows per host, reason, process (comm, tgid) and whether a unix socket's."""

    host_id = models.TextField()
    drop_reason_str = models.TextField()
    comm = models.TextField()
    tgid = models.BigIntegerField()
    unix = models.BooleanField()
    nulls = models.SmallIntegerField(default=0)  # bit 1: reason, 4: comm, 8: tgid NULL
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["host_id", "drop_reason_str", "comm", "tgid", "unix", "nulls"], name="nt_dropsum_proc_key"
            )
        ]


class DropBySecond(models.Model):
    """skb_drop rows per host, reason, whole second of ts_wall and whether a unix socket's."""

    host_id = models.TextField()
    drop_reason_str = models.TextField()
    second = models.BigIntegerField()  # floor(ts_wall)
    unix = models.BooleanField()
    nulls = models.SmallIntegerField(default=0)  # bit 1: reason NULL
    n = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["host_id", "drop_reason_str", "second", "unix", "nulls"], name="nt_dropsum_sec_key"
            )
        ]
        indexes = [
            models.Index(fields=["second"], name="nt_dropsum_sec"),
            models.Index(fields=["host_id", "second"], name="nt_dropsum_host_sec"),
        ]
