"""Alert notifications against real local servers: webhook (with retries, a server that
never answers, a full queue), syslog over UDP, and e-mail through Django's SMTP backend."""

from __future__ import annotations

import http.server
import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import pytest
from smtp_sink import SmtpSink, serve

from analysis.alerts.config import config_from_mapping
from analysis.alerts.engine import run
from analysis.alerts.notify import Notifiers, SyslogNotifier, WebhookNotifier
from tests.alert_streams import Stream, engine, feed_all
from translators.records import from_json


def alerts(n: int):
    s, e = Stream(), engine()
    out = []
    for port in range(n):
        out += feed_all(e, [s.drop("TCP_ZEROWINDOW", "10.0.0.9", 5001, "10.0.0.2", 7000 + port)])
    return out


class Server:
    """A real HTTP server on 127.0.0.1; `plan` decides each response (status code or 'hang')."""

    def __init__(self, plan: list[object]) -> None:
        self.plan = plan
        self.bodies: list[bytes] = []
        self.got_request = threading.Event()
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                outer.bodies.append(body)
                step = outer.plan.pop(0) if outer.plan else 200
                outer.got_request.set()
                if step == "hang":
                    outer.release.wait(30)
                    step = 200
                self.send_response(int(step))  # type: ignore[call-overload]
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server_factory() -> Iterator:
    made: list[Server] = []

    def make(plan: list[object]) -> Server:
        made.append(Server(plan))
        return made[-1]

    yield make
    for srv in made:
        srv.close()


def test_it_posts_each_alert_as_json_to_the_webhook(server_factory):
    srv = server_factory([])
    hook = WebhookNotifier(srv.url, backoff_s=0.01)
    sent = alerts(3)
    assert [hook.submit(a) for a in sent] == [True, True, True]
    assert hook.wait_idle(10)
    hook.close()
    assert [from_json(b) for b in srv.bodies] == sent
    assert json.loads(srv.bodies[0])["kind"] == "alert"
    assert (hook.stats.sent, hook.stats.failed, hook.stats.attempts) == (3, 0, 3)


def test_it_retries_with_backoff_until_a_failing_webhook_succeeds(server_factory, caplog):
    srv = server_factory([500, 503, 200])
    hook = WebhookNotifier(srv.url, backoff_s=0.01, retries=5)
    [a] = alerts(1)
    with caplog.at_level(logging.WARNING, logger="nettrail.alerts.notify"):
        assert hook.submit(a)
        assert hook.wait_idle(10)
    hook.close()
    assert len(srv.bodies) == 3 and len(set(srv.bodies)) == 1
    assert (hook.stats.sent, hook.stats.failed, hook.stats.attempts) == (1, 0, 3)
    assert [r.getMessage().split(": ")[1] for r in caplog.records] == [
        "attempt 1 of 6 for alert " + a.alert_id + " failed",
        "attempt 2 of 6 for alert " + a.alert_id + " failed",
    ]


def test_a_webhook_that_never_answers_does_not_block_the_feeder(server_factory):
    srv = server_factory(["hang"])
    hook = WebhookNotifier(srv.url, queue_size=5, timeout_s=30, backoff_s=0.01)
    batch = alerts(51)
    assert hook.submit(batch[0])
    assert srv.got_request.wait(10)  # the worker is now stuck inside the first POST
    accepted = [hook.submit(a) for a in batch[1:]]  # returns although the server holds the worker
    assert not srv.release.is_set()
    assert accepted == [True] * 5 + [False] * 45
    assert hook.stats.dropped == 45
    srv.release.set()
    assert hook.wait_idle(10)
    hook.close()
    assert hook.stats.sent == 6


def test_it_logs_and_counts_an_alert_it_gives_up_on(server_factory, caplog):
    srv = server_factory(["hang", "hang"])
    hook = WebhookNotifier(srv.url, timeout_s=0.2, retries=1, backoff_s=0.01)
    [a] = alerts(1)
    with caplog.at_level(logging.WARNING, logger="nettrail.alerts.notify"):
        hook.submit(a)
        assert hook.wait_idle(10)
    hook.close()
    assert (hook.stats.sent, hook.stats.failed, hook.stats.attempts) == (0, 1, 2)
    assert caplog.records[-1].levelno == logging.ERROR
    assert f"gave up on alert K5 {a.alert_id} after 2 attempts" in caplog.records[-1].getMessage()


def test_it_drops_info_and_below_threshold_alerts_before_queueing(server_factory):
    srv = server_factory([])
    hook = WebhookNotifier(srv.url, min_severity="warning")
    [a] = alerts(1)
    a.severity = "notice"
    assert hook.submit(a) is False
    hook.close()
    assert srv.bodies == []


def test_it_writes_one_syslog_line_per_alert_with_the_matching_priority():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    port = sock.getsockname()[1]
    try:
        sl = SyslogNotifier(f"127.0.0.1:{port}", min_severity="notice")
        [a] = alerts(1)
        assert sl.submit(a)
        line = sock.recv(4096).decode()
        assert (
            line
            == f"<28>nettrail: K5/tcp-zerowindow warning open x1 h1 10.0.0.9:5001 -> 10.0.0.2:7000: {a.message}\x00"
        )
        a.severity = "notice"
        assert sl.submit(a)
        assert sock.recv(4096).startswith(b"<29>nettrail: K5/tcp-zerowindow notice")  # daemon.notice
        a.severity = "info"
        assert sl.submit(a) is False
        sl.close()
    finally:
        sock.close()


class _Smtp(SmtpSink):
    received: list[str] = []


def test_it_mails_an_alert_through_djangos_smtp_settings(tmp_path):
    srv = serve(_Smtp)
    [a] = alerts(1)
    (tmp_path / "alert.json").write_bytes(__import__("translators.records", fromlist=["to_json"]).to_json(a))
    script = textwrap.dedent(f"""
        import django
        from django.conf import settings
        settings.configure(EMAIL_BACKEND="django.core.mail.backends.smtp.EmailBackend", EMAIL_HOST="127.0.0.1",
                           EMAIL_PORT={srv.server_address[1]}, DEFAULT_FROM_EMAIL="nettrail@example.test")
        django.setup()
        from webapp.traces.alert_mail import send_alert_email
        from translators.records import from_json
        alert = from_json(open({str(tmp_path / "alert.json")!r}, "rb").read())
        print(send_alert_email(alert, ["ops@example.test", " "]))
    """)
    try:
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    finally:
        srv.shutdown()
        srv.server_close()
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"
    [msg] = _Smtp.received
    assert "Subject: [nettrail] warning K5/tcp-zerowindow on h1 (open)" in msg
    assert "To: ops@example.test" in msg and "From: nettrail@example.test" in msg
    assert a.message.split(":")[0] in msg and f"alert id: {a.alert_id}" in msg


def test_the_pipeline_notifies_through_the_configured_channels(server_factory):
    srv = server_factory([])
    cfg = config_from_mapping({"notify": {"webhook_url": srv.url, "webhook_backoff_s": 0.01}})
    notifiers = Notifiers(cfg.notify)
    s = Stream()
    recs = [s.drop("TCP_ZEROWINDOW", "10.0.0.9", 5001, "10.0.0.2", 7000)]
    out = list(run(iter(recs), cfg, on_alert=notifiers.submit))
    assert notifiers.channels[0].wait_idle(10)  # type: ignore[union-attr]
    notifiers.close()
    assert [from_json(b) for b in srv.bodies] == [r for r in out if r.kind == "alert"]


def test_update_versions_are_not_notified_again_but_a_rise_and_the_close_are(server_factory):
    """Issue 34: an alert's numbers are re-emitted (book.py); a webhook hears of an alert
    when it opens, when its severity rises and when it closes, not at every update."""
    srv = server_factory([])
    cfg = config_from_mapping(
        {
            "notify": {"webhook_url": srv.url, "webhook_backoff_s": 0.01, "min_severity": "notice"},
            "K10": {"close_wait_s": 2, "sweep_s": 1},
        }
    )
    notifiers = Notifiers(cfg.notify)
    s = Stream()
    recs: list = []
    for i in range(60):  # 60 sockets of one process into CLOSE_WAIT, one every 0.5 s
        f = s.flow(src="10.0.0.2", sport=8080, dst="10.0.0.9", dport=41000 + i, pid=700, comm="leaky")
        recs += [s.state(f, "SYN_RECEIVED", "ESTABLISHED"), s.state(f, "ESTABLISHED", "CLOSE_WAIT")]
        s.advance(0.5)
    out = [r for r in run(iter(recs), cfg, on_alert=notifiers.submit) if r.kind == "alert"]
    assert notifiers.channels[0].wait_idle(10)  # type: ignore[union-attr]
    notifiers.close()
    versions = [(a.severity, a.status) for a in out]
    assert len(versions) > 3  # updates: the count grew
    posted = [from_json(b) for b in srv.bodies]
    assert [(a.severity, a.status) for a in posted] == [("notice", "open"), ("warning", "open")]
    assert {a.alert_id for a in posted} == {out[0].alert_id}
