"""The Overview's Connection indexes (issue 31 item 4, bench/bench_pages_at_volume.py):
open connections per host, top by retransmissions (models.py says which query each
serves), and, on SQLite only, top by bytes: an index over the expression the dashboard
sorts by (queries.annotated's total_bytes). Not on PostgreSQL: bytes change with nearly
every update of a connection, and an index over them would make each such update a
non-HOT one (webapp/traces/recency.py). That index is not in Django's model state.
"""

from typing import Any

from django.db import migrations, models

BYTES_INDEX = "nt_conn_bytes"
BYTES = "(COALESCE(bytes_orig, 0) + COALESCE(bytes_resp, 0))"  # = queries.annotated()'s total_bytes


def forward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    table = apps.get_model("traces", "Connection")._meta.db_table
    quote = schema_editor.quote_name
    # Overview: top 10 by bytes (`WHERE total_bytes > 0 ORDER BY total_bytes DESC LIMIT 10`).
    schema_editor.execute(f"CREATE INDEX {quote(BYTES_INDEX)} ON {quote(table)} ({BYTES})")


def backward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "sqlite":
        return
    schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(BYTES_INDEX)}")


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0029_tcp_lifecycle"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="connection",
            index=models.Index(condition=models.Q(closed=False), fields=["host_id"], name="nt_conn_open"),
        ),
        migrations.AddIndex(
            model_name="connection",
            index=models.Index(condition=models.Q(retransmits__gt=0), fields=["retransmits"], name="nt_conn_retrans"),
        ),
        migrations.RunPython(forward, backward),
    ]
