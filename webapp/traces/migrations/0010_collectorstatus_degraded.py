# collector_status.degraded (records netprov/2): existing rows came from collectors that
# named no degradations, hence the empty default for them.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0009_connection_local_direction"),
    ]

    operations = [
        migrations.AddField(
            model_name="collectorstatus",
            name="degraded",
            field=models.JSONField(default=dict),
            preserve_default=False,
        ),
    ]
