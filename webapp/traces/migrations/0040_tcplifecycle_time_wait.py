# tcp --tcp-fold: whether a folded socket's last change put it in TIME_WAIT (the Overview's
# "entered TIME_WAIT within 60 s", webapp/dashboard/queries.py)

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0039_buffers_newest_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="tcplifecycle",
            name="time_wait",
            field=models.BooleanField(null=True),
        ),
    ]
