# tcp --tcp-fold: a folded socket's Zeek conn_state and history (analysis/flows/live_summary.py)

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0037_tcplifecycle_state_peer_closed"),
    ]

    operations = [
        migrations.AddField(
            model_name="tcplifecycle",
            name="conn_state",
            field=models.TextField(null=True),
        ),
        migrations.AddField(
            model_name="tcplifecycle",
            name="history",
            field=models.TextField(null=True),
        ),
        migrations.AddField(
            model_name="tcplifecycle",
            name="direction_guessed",
            field=models.BooleanField(null=True),
        ),
    ]
