"""PostgreSQL only: the Connection indexes over last_seen move to a coarse copy of it, so
that the writer's updates of last_seen are HOT (webapp/traces/recency.py says why).

* a stored generated column last_seen_bucket = floor(last_seen / BUCKET_S);
* each Connection index naming last_seen is rebuilt, under the same name, with
  last_seen_bucket in its place: (host_id, last_seen) becomes (host_id, last_seen_bucket),
  (last_seen) becomes (last_seen_bucket), and so on;
* fillfactor FILLFACTOR: room on each page for the new versions of its rows (a HOT
  update keeps the new version on the old one's page).

No change to Django's model state (fields, index names): makemigrations stays clean and
SQLite keeps its (..., last_seen) indexes. A later migration that removes one of these
indexes by name works on both; one that changes a Connection index over last_seen must
repeat this for PostgreSQL.
"""

from typing import Any

from django.db import migrations

BUCKET_S = 10  # = recency.BUCKET_S when this migration was written (a migration keeps its own)
FILLFACTOR = 70
COLUMN = "last_seen_bucket"


def _last_seen_indexes(apps: Any) -> tuple[str, list[Any]]:
    model = apps.get_model("traces", "Connection")
    return model._meta.db_table, [index for index in model._meta.indexes if "last_seen" in index.fields]


def _rebuild(schema_editor: Any, table: str, indexes: list[Any], column: str) -> None:
    quote = schema_editor.quote_name
    for index in indexes:
        columns = ", ".join(quote(column if f == "last_seen" else f) for f in index.fields)
        schema_editor.execute(f"DROP INDEX IF EXISTS {quote(index.name)}")
        schema_editor.execute(f"CREATE INDEX {quote(index.name)} ON {quote(table)} ({columns})")


def forward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table, indexes = _last_seen_indexes(apps)
    quote = schema_editor.quote_name
    # The fillfactor first: adding a stored column rewrites the table with it.
    schema_editor.execute(f"ALTER TABLE {quote(table)} SET (fillfactor = {FILLFACTOR})")
    schema_editor.execute(
        f"ALTER TABLE {quote(table)} ADD COLUMN {quote(COLUMN)} bigint"
        f" GENERATED ALWAYS AS (floor({quote('last_seen')} / {BUCKET_S})) STORED"
    )
    _rebuild(schema_editor, table, indexes, COLUMN)


def backward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table, indexes = _last_seen_indexes(apps)
    quote = schema_editor.quote_name
    schema_editor.execute(f"ALTER TABLE {quote(table)} DROP COLUMN {quote(COLUMN)}")  # and its indexes
    schema_editor.execute(f"ALTER TABLE {quote(table)} RESET (fillfactor)")
    _rebuild(schema_editor, table, indexes, "last_seen")


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0015_flowcounters_skbs"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
