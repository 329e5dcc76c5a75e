"""E-mail for the alerts ingest stores, when ``NETTRAIL_ALERT_EMAILS`` names recipients.

Ingest hands every batch's new records to ``submit`` after they are committed;
``submit`` only filters and queues (bounded), and one background thread sends through
``send_alert_email`` below (Django's mail settings: EMAIL_HOST,
EMAIL_PORT, DEFAULT_FROM_EMAIL, ...), so a slow or dead mail server never blocks
ingest. An alert is emitted again each time it escalates, is fired again or closes
(same ``alert_id``): it is mailed when it first arrives, when its severity rises and
when it closes, not for every repeat. Below ``NETTRAIL_ALERT_EMAIL_MIN_SEVERITY``
(default warning) and info alerts are never mailed. Failures are logged; when the
queue is full the alert is dropped from mail (it is stored) and counted. Alerts about
nettrail's own traffic (the browser viewing the dashboard, the collector's ingest) are
never mailed: the identity rule of the alert views, webapp/dashboard/own_traffic.py,
read against the stored rows (one query per batch that has alerts worth a mail).

Keep in sync with docs/alerts.md (Notifications) and webapp/traces/ingest.py.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from analysis.alerts.book import SEVERITY_RANK
from analysis.alerts.notify import summary_line, worth_notifying
from translators.records import Alert, Record

RECIPIENTS_ENV = "NETTRAIL_ALERT_EMAILS"
MIN_SEVERITY_ENV = "NETTRAIL_ALERT_EMAIL_MIN_SEVERITY"
QUEUE_SIZE = 1000
REMEMBERED = 10_000  # alert ids whose mailed version is remembered (oldest forgotten first)

log = logging.getLogger("nettrail.alerts.mail")


def send_alert_email(alert: Alert, recipients: Iterable[str]) -> int:
    """E-mail one alert through Django's configured mail backend; returns messages sent.

    Django is imported here, lazily, so importing this module (as ingest does) costs
    nothing until a mail is sent.
    """
    from django.conf import settings
    from django.core.mail import send_mail

    to = [r.strip() for r in recipients if r.strip()]
    if not to:
        return 0
    cond = f"/{alert.condition}" if alert.condition else ""
    subject = f"[nettrail] {alert.severity} {alert.rule_id}{cond} on {alert.host_id} ({alert.status})"
    lines = [alert.message, "", summary_line(alert), f"alert id: {alert.alert_id}",
             f"thresholds: {alert.thresholds}", f"evidence (record seq): {alert.evidence}"]  # fmt: skip
    if alert.incomplete:
        lines.append("The collector lost events in this window: the data behind this alert is incomplete.")
    return int(send_mail(subject, "\n".join(lines), getattr(settings, "DEFAULT_FROM_EMAIL", None), to))


def recipients() -> list[str]:
    return [a.strip() for a in os.environ.get(RECIPIENTS_ENV, "").split(",") if a.strip()]


def _own_traffic(alerts: Sequence[Alert]) -> set[tuple[str, str, int]]:
    """The (host_id, boot_id, seq) of the alerts about nettrail's own traffic; they are
    stored already (submit runs after the commit). Imported here: Django's models load
    only when there is an alert to mail."""
    from webapp.dashboard.own_traffic import own_alerts

    return own_alerts({(a.host_id, a.boot_id, a.seq) for a in alerts})


class AlertMailer:
    def __init__(self, queue_size: int = QUEUE_SIZE) -> None:
        self._queue: queue.Queue[tuple[Alert, list[str]]] = queue.Queue(maxsize=queue_size)
        # (host_id, alert_id) -> (severity rank, status): an alert is its host's, so another
        # host's record with the same alert_id neither closes nor silences it (issue 33 item 3)
        self._mailed: OrderedDict[tuple[str, str], tuple[int, str]] = OrderedDict()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.failed = 0
        self.dropped = 0

    def submit(self, records: Sequence[Record]) -> int:
        """Queue the alerts among ``records`` worth a mail; returns how many were queued."""
        to = recipients()
        if not to:
            return 0
        level = os.environ.get(MIN_SEVERITY_ENV, "warning")
        worth = [rec for rec in records if type(rec) is Alert and worth_notifying(rec, level)]
        if not worth:
            return 0
        own = _own_traffic(worth)
        queued = 0
        for rec in worth:
            if (rec.host_id, rec.boot_id, rec.seq) not in own and self._news(rec):
                try:
                    self._queue.put_nowait((rec, to))
                except queue.Full:
                    self.dropped += 1
                    log.warning("alert mail queue full: %s %s not mailed", rec.rule_id, rec.alert_id)
                    continue
                queued += 1
        if queued:
            self._start()
        return queued

    def _news(self, alert: Alert) -> bool:
        """First version, a higher severity, or the close of an alert id."""
        key = (alert.host_id, alert.alert_id or f"{alert.boot_id}/{alert.seq}")
        now = (SEVERITY_RANK[alert.severity], alert.status)
        with self._lock:
            before = self._mailed.get(key)
            if before is not None and now[0] <= before[0] and (now[1] == before[1] or before[1] == "closed"):
                return False
            self._mailed[key] = (max(now[0], before[0]) if before else now[0], now[1])
            self._mailed.move_to_end(key)
            while len(self._mailed) > REMEMBERED:
                self._mailed.popitem(last=False)
        return True

    def _start(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="nettrail-alert-mail", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            alert, to = self._queue.get()
            try:
                self.sent += send_alert_email(alert, to)
            except Exception as exc:  # noqa: BLE001 - any mail failure is logged, never raised into ingest
                self.failed += 1
                log.warning("mailing alert %s %s failed: %s", alert.rule_id, alert.alert_id, exc)
            finally:
                self._queue.task_done()

    def join(self) -> None:
        """Wait until every queued alert was sent or failed (tests, shutdown)."""
        self._queue.join()


MAILER = AlertMailer()
