# The connections filter `host H and retrans > 0` counted from an index (issue 31 item 4).

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0040_tcplifecycle_time_wait"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="connection",
            index=models.Index(
                condition=models.Q(("retransmits__gt", 0)), fields=["host_id"], name="nt_conn_retrans_host"
            ),
        ),
    ]
