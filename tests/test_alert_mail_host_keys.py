"""Alert mail keys an alert by (host, alert id): host A's record with host B's alert_id
(closed, or more severe) is A's own alert and neither closes nor silences B's, whose
escalation and close are still mailed (issue 33 item 3; webapp/traces/alert_mail.py).
Real ingest with each host's token, real SMTP server (tests/smtp_sink.py)."""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments
from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client
from smtp_sink import SmtpSink, serve
from webapp_cast import Cast, cast, env, post  # noqa: F401 (cast is a fixture)

from translators.records import Alert
from webapp.traces.alert_mail import MAILER

pytestmark = pytest.mark.django_db
SHARED = "hk-mail-7d21"  # B's alert id, reused by A; unique to this file (MAILER remembers ids)
T0 = 1_764_000_000.0  # a plausible wall clock (ingest refuses times before 2000)


class Smtp(SmtpSink):
    received: list[str] = []


@pytest.fixture
def smtp(settings, monkeypatch) -> Iterator[list[str]]:
    srv = serve(Smtp)
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", srv.server_address[1]
    settings.DEFAULT_FROM_EMAIL = "nettrail@example.test"
    monkeypatch.setenv("NETTRAIL_ALERT_EMAILS", "ops@example.test")
    Smtp.received = []
    try:
        yield Smtp.received
    finally:
        MAILER.join()
        srv.shutdown()
        srv.server_close()


def alert(host: str, seq: int, status: str, severity: str) -> Alert:
    return Alert(
        **{**env(host, seq), "ts_wall": T0 + seq}, provider="nettrail", probe="alert", rule_id="K4",
        condition="overflow", alert_id=SHARED, severity=severity, status=status, start=T0, count=seq,
        message=f"{host} dropped {seq} connection attempts",
    )  # fmt: skip


def send(token: str, record: Alert) -> None:
    answer = post(Client(), token, [record])
    assert answer.status_code == 200, answer.content


def test_another_hosts_record_with_the_same_alert_id_does_not_silence_its_mail(cast: Cast, smtp: list[str]) -> None:
    send(cast.token_b, alert("host-b", 1, "open", "warning"))
    send(cast.token_a, alert("host-a", 2, "closed", "critical"))  # A's own alert, B's id
    send(cast.token_b, alert("host-b", 3, "open", "critical"))  # B escalates: news for B
    send(cast.token_b, alert("host-b", 4, "closed", "critical"))  # B closes: news for B
    MAILER.join()
    subjects = [line for msg in smtp for line in msg.splitlines() if line.startswith("Subject:")]
    assert subjects == [
        "Subject: [nettrail] warning K4/overflow on host-b (open)",
        "Subject: [nettrail] critical K4/overflow on host-a (closed)",
        "Subject: [nettrail] critical K4/overflow on host-b (open)",
        "Subject: [nettrail] critical K4/overflow on host-b (closed)",
    ]
