"""Ingest e-mails the alerts it stores when NETTRAIL_ALERT_EMAILS is set: from a
background thread (a mail server that does not answer never holds up ingest), once
per alert and change (first version, escalation, close), through Django's SMTP
settings, against a small SMTP server the test runs."""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments
from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.test import Client
from smtp_sink import SmtpSink, serve
from webapp_cast import BOOT, T0, Cast, cast, post  # noqa: F401 (cast is a fixture)

from translators.records import Alert
from webapp.traces.alert_mail import MAILER

pytestmark = pytest.mark.django_db


class Smtp(SmtpSink):
    """Waits for `gate` before greeting."""

    received: list[str] = []
    gate = threading.Event()


@pytest.fixture
def smtp(settings, monkeypatch) -> Iterator[list[str]]:
    srv = serve(Smtp)
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", srv.server_address[1]
    settings.DEFAULT_FROM_EMAIL = "nettrail@example.test"
    monkeypatch.setenv("NETTRAIL_ALERT_EMAILS", "ops@example.test, oncall@example.test")
    Smtp.received = []
    Smtp.gate.set()
    try:
        yield Smtp.received
    finally:
        Smtp.gate.set()
        MAILER.join()
        srv.shutdown()
        srv.server_close()


def alert(seq: int, alert_id: str, status: str = "open", severity: str = "warning", count: int = 1) -> Alert:
    return Alert(
        host_id="host-a", boot_id=BOOT, seq=(1 << 62) + seq, ts_ns=seq, ts_wall=T0 + seq, provider="nettrail",
        probe="alert", rule_id="K4", condition="overflow", alert_id=alert_id, severity=severity, status=status,
        start=T0, count=count, message=f"The listener dropped {seq} connection attempts",
    )  # fmt: skip


def subjects(received: list[str]) -> list[str]:
    return [line for msg in received for line in msg.splitlines() if line.startswith("Subject:")]


def test_it_mails_an_alert_when_it_opens_escalates_and_closes_not_for_repeats(cast: Cast, smtp: list[str]) -> None:
    batch = [alert(1, "m-1"), alert(2, "m-1", count=2), alert(3, "m-1", severity="critical", count=3)]
    assert post(Client(), cast.token_a, batch).status_code == 200
    later = [alert(4, "m-1", severity="critical", count=4), alert(5, "m-1", "closed", "critical", 4)]
    later.append(alert(6, "m-2", severity="info"))  # info never mails
    assert post(Client(), cast.token_a, later).status_code == 200
    MAILER.join()
    assert subjects(smtp) == [
        "Subject: [nettrail] warning K4/overflow on host-a (open)",
        "Subject: [nettrail] critical K4/overflow on host-a (open)",
        "Subject: [nettrail] critical K4/overflow on host-a (closed)",
    ]
    assert all("To: ops@example.test, oncall@example.test" in m for m in smtp)
    assert "alert id: m-1" in smtp[0] and "The listener dropped 1 connection attempts" in smtp[0]


def test_a_mail_server_that_does_not_answer_does_not_hold_up_ingest(cast: Cast, smtp: list[str]) -> None:
    Smtp.gate.clear()  # the server accepts the connection and says nothing
    response = post(Client(), cast.token_a, [alert(7, "m-3")])
    assert response.status_code == 200 and response.json() == {"stored": 1, "duplicates": 0, "tracing": None}
    assert smtp == []  # answered while the mail is still waiting for the server
    Smtp.gate.set()
    MAILER.join()
    assert subjects(smtp) == ["Subject: [nettrail] warning K4/overflow on host-a (open)"]


def test_without_recipients_nothing_is_queued(cast: Cast, smtp: list[str], monkeypatch) -> None:
    monkeypatch.delenv("NETTRAIL_ALERT_EMAILS")
    assert post(Client(), cast.token_a, [alert(8, "m-4")]).status_code == 200
    MAILER.join()
    assert smtp == []
