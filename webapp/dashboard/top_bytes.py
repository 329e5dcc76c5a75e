"""The Overview's top connections by bytes (bytes_orig + bytes_resp, ties newest first),
read from an index on both databases.

SQLite has an index over the expression itself (nt_conn_bytes, migration 0030; the
expression spelled literally, TOTAL_BYTES_SQL). On PostgreSQL such an index would make
every update of a connection's bytes a non-HOT update (a new entry in each of the
table's indexes, webapp/traces/recency.py), so migration 0036 adds a stored generated
column ``bytes_bucket = floor(ln(max(bytes, 1)) * PER_E)`` with its index, and the order
becomes ``bytes_bucket DESC, bytes DESC, last_seen DESC``: the same order (the bucket
never decreases as the bytes grow), served by an index scan of the highest buckets and
an incremental sort within them instead of a sort of every connection (0.63-0.77 s at
a million connections, docs/benchmarks.md). The column is not a model field.
Keep in sync with: migrations 0030 and 0036, queries.TOTAL_BYTES_SQL,
tests/test_pg_connection_indexes.py.
"""

from __future__ import annotations

from django.db import connections
from django.db.models import QuerySet, SmallIntegerField
from django.db.models.expressions import RawSQL

from webapp.dashboard import queries
from webapp.traces.models import Connection

PER_E = 64  # buckets per factor e of bytes (~1.6 % wide): migration 0036's
COLUMN = "bytes_bucket"


def ordered(conns: QuerySet[Connection]) -> QuerySet[Connection]:
    """conns (queries.annotated()) with bytes, largest first, ties newest first."""
    order = [RawSQL(queries.TOTAL_BYTES_SQL, []).desc(), "-last_seen"]
    conns = conns.filter(total_bytes__gt=0)
    if connections[conns.db].vendor != "postgresql":
        return conns.order_by(*order)
    table = connections[conns.db].ops.quote_name(Connection._meta.db_table)
    bucket = RawSQL(f"{table}.{COLUMN}", [], output_field=SmallIntegerField())
    return conns.order_by(bucket.desc(), *order)
