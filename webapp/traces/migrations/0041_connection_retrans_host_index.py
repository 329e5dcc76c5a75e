"""The connections filter `host H and retrans > 0` counted from an index (issue 31 item 4),
on PostgreSQL only: there the count read every retransmitting connection's page (0.4-1 s
at a million connections). SQLite picks this index for the page too and then sorts every
match (1.2 s at a million, against a walk down nt_conn_host_last), so it does not get it;
Django's state has it on both, as models.py says."""

from typing import Any

from django.db import migrations, models

INDEX = models.Index(condition=models.Q(("retransmits__gt", 0)), fields=["host_id"], name="nt_conn_retrans_host")


def forward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.add_index(apps.get_model("traces", "Connection"), INDEX)
    else:  # a database that applied this migration's first version (it made the index everywhere)
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX.name}")


def backward(apps: Any, schema_editor: Any) -> None:
    schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX.name}")


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0040_tcplifecycle_time_wait"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.AddIndex(model_name="connection", index=INDEX)],
            database_operations=[migrations.RunPython(forward, backward)],
        ),
    ]
