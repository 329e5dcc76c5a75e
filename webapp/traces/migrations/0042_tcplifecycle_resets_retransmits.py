# tcp --tcp-fold: the fold's sums of a socket's resets and retransmissions (kmod/fold.bpf.h)

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0041_connection_retrans_host_index"),
    ]

    operations = [
        migrations.AddField(model_name="tcplifecycle", name="retransmits", field=models.BigIntegerField(default=0), preserve_default=False),
        migrations.AddField(model_name="tcplifecycle", name="first_retransmit_us", field=models.BigIntegerField(null=True)),
        migrations.AddField(model_name="tcplifecycle", name="last_retransmit_us", field=models.BigIntegerField(null=True)),
        migrations.AddField(model_name="tcplifecycle", name="resets", field=models.BigIntegerField(default=0), preserve_default=False),
        migrations.AddField(model_name="tcplifecycle", name="reset_sender", field=models.TextField(null=True)),
        migrations.AddField(model_name="tcplifecycle", name="reset_state", field=models.TextField(null=True)),
        migrations.AddField(model_name="tcplifecycle", name="reset_us", field=models.BigIntegerField(null=True)),
    ]
