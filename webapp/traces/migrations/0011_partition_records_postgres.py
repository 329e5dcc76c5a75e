"""PostgreSQL only: every record table becomes partitioned by day of ts_wall (webapp/traces/partitions.py).

No change to Django's model state (the columns, indexes and constraint names stay),
so makemigrations stays clean; SQLite keeps its plain tables.
"""

from typing import Any

from django.db import migrations

from translators.records import RECORD_TYPES
from webapp.traces.partitions import UNPARTITIONED_KINDS, convert
from webapp.traces.schema import kind_of


def partition(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for cls in RECORD_TYPES:
        if kind_of(cls) in UNPARTITIONED_KINDS:
            continue
        name = "ConnectionSummary" if kind_of(cls) == "connection" else cls.__name__
        try:
            model = apps.get_model("traces", name)
        except LookupError:  # a kind added by a later migration converts its table there
            continue
        convert(schema_editor, model)


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0010_collectorstatus_degraded"),
    ]

    operations = [
        migrations.RunPython(partition, migrations.RunPython.noop),
    ]
