"""PostgreSQL only: the Overview's top connections by bytes through a coarse copy of
their byte count, so that the top ten is an index range instead of a scan of the table
(dashboard/top_bytes.py says why an index over the bytes themselves is not one).

* a stored generated column bytes_bucket = floor(ln(max(bytes_orig + bytes_resp, 1)) * 64):
  ~1.6 % of bytes wide, never decreasing as the bytes grow;
* the index nt_conn_bytes_bucket over it.

A connection's bucket changes about 44 times per doubling of its bytes, so most of the
writer's updates of a long transfer's bytes stay HOT (recency.py explains HOT); a short
connection's updates change last_seen_bucket and closed anyway. No change to Django's
model state; SQLite keeps its expression index nt_conn_bytes (migration 0030).
"""

from typing import Any

from django.db import migrations

PER_E = 64  # = top_bytes.PER_E when this migration was written (a migration keeps its own)
COLUMN = "bytes_bucket"
INDEX = "nt_conn_bytes_bucket"


def forward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(apps.get_model("traces", "Connection")._meta.db_table)
    total = "COALESCE(bytes_orig, 0) + COALESCE(bytes_resp, 0)"
    schema_editor.execute(
        f"ALTER TABLE {table} ADD COLUMN {COLUMN} smallint"
        f" GENERATED ALWAYS AS (floor(ln(greatest({total}, 1)::float8) * {PER_E})) STORED"
    )
    schema_editor.execute(f"CREATE INDEX {INDEX} ON {table} ({COLUMN})")


def backward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(apps.get_model("traces", "Connection")._meta.db_table)
    schema_editor.execute(f"ALTER TABLE {table} DROP COLUMN {COLUMN}")  # and its index


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0035_drop_summaries"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
