"""Alert notifications: webhook (HTTP POST of the alert JSON) and syslog.

The engine never waits on a notification. ``WebhookNotifier.submit`` puts the alert on
a bounded queue and returns at once; a background thread POSTs it, retrying with
exponential backoff, and logs every failure. When the queue is full the alert is
dropped from notification (it is still in the record stream) and the drop is logged
and counted. ``SyslogNotifier`` writes one line per alert through the standard
library's SysLogHandler. E-mail needs Django's mail settings, so it lives with the
webapp (``webapp.traces.alert_mail.send_alert_email``): this library never imports Django.

Keep in sync with the [notify] section of defaults.toml and docs/alerts.md.
"""

from __future__ import annotations

import logging
import logging.handlers
import queue
import threading
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from translators.records import Alert, to_json

from .book import SEVERITY_RANK

log = logging.getLogger("nettrail.alerts.notify")
MAX_TOLD = 10000  # alerts whose last notified state is remembered (the open-alert cap)


def worth_notifying(alert: Alert, min_severity: str) -> bool:
    """info never notifies (anomalies.md 1); below the configured level neither."""
    return alert.severity != "info" and SEVERITY_RANK[alert.severity] >= SEVERITY_RANK[min_severity]


def summary_line(alert: Alert) -> str:
    where = alert.host_id
    if alert.src or alert.dst:
        where += f" {alert.src or '*'}:{alert.sport or '*'} -> {alert.dst or '*'}:{alert.dport or '*'}"
    cond = f"/{alert.condition}" if alert.condition else ""
    return f"{alert.rule_id}{cond} {alert.severity} {alert.status} x{alert.count} {where}: {alert.message}"


@dataclass
class WebhookStats:
    sent: int = 0
    failed: int = 0
    dropped: int = 0
    attempts: int = 0


class WebhookNotifier:
    """POSTs alerts as JSON from a background thread; ``submit`` never blocks."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 5.0,
        retries: int = 5,
        backoff_s: float = 0.5,
        queue_size: int = 1000,
        min_severity: str = "warning",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.min_severity = min_severity
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        self.stats = WebhookStats()
        self._queue: queue.Queue[Alert | None] = queue.Queue(maxsize=queue_size)
        self._stop = threading.Event()
        self._idle = threading.Condition()
        self._busy = 0
        self._thread = threading.Thread(target=self._run, name="nettrail-webhook", daemon=True)
        self._thread.start()

    def submit(self, alert: Alert) -> bool:
        """Queue an alert for delivery; False when it is below the level or the queue is full."""
        if not worth_notifying(alert, self.min_severity):
            return False
        with self._idle:
            self._busy += 1
        try:
            self._queue.put_nowait(alert)
        except queue.Full:
            self._done()
            self.stats.dropped += 1
            log.warning("webhook queue full (%d): alert %s %s not sent to %s", self._queue.maxsize,
                        alert.rule_id, alert.alert_id, self.url)  # fmt: skip
            return False
        return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until every queued alert was delivered or given up on (tests, shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop the thread; alerts still queued are not delivered."""
        self._stop.set()
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout)

    def _done(self) -> None:
        with self._idle:
            self._busy -= 1
            self._idle.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            alert = self._queue.get()
            if alert is None:
                return
            try:
                self._deliver(alert)
            finally:
                self._done()

    def _deliver(self, alert: Alert) -> None:
        body = to_json(alert)
        for attempt in range(self.retries + 1):
            self.stats.attempts += 1
            try:
                req = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    resp.read()
                self.stats.sent += 1
                return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                log.warning("webhook %s: attempt %d of %d for alert %s failed: %s", self.url, attempt + 1,
                            self.retries + 1, alert.alert_id, exc)  # fmt: skip
            if self._stop.wait(self.backoff_s * (2**attempt)):
                return
        self.stats.failed += 1
        log.error("webhook %s: gave up on alert %s %s after %d attempts", self.url, alert.rule_id,
                  alert.alert_id, self.retries + 1)  # fmt: skip


NOTICE = 25  # between INFO and WARNING, so syslog gets its own "notice" priority
_LEVELS = {"info": logging.INFO, "notice": NOTICE, "warning": logging.WARNING, "critical": logging.CRITICAL}


class _Handler(logging.handlers.SysLogHandler):
    def mapPriority(self, levelName: str) -> str:  # noqa: N802 (stdlib name)
        return "notice" if levelName == "NOTICE" else super().mapPriority(levelName)


class SyslogNotifier:
    """One syslog line per alert: "nettrail: K1/ratio warning open x3 host a:1 -> b:2: message"."""

    def __init__(
        self, address: str = "/dev/log", *, min_severity: str = "warning", facility: int | None = None
    ) -> None:
        logging.addLevelName(NOTICE, "NOTICE")
        self.min_severity = min_severity
        target: str | tuple[str, int] = address
        if ":" in address and not address.startswith("/"):
            host, port = address.rsplit(":", 1)
            target = (host, int(port))
        fac = facility if facility is not None else logging.handlers.SysLogHandler.LOG_DAEMON
        self.handler = _Handler(address=target, facility=fac)
        self.handler.setFormatter(logging.Formatter("nettrail: %(message)s"))

    def submit(self, alert: Alert) -> bool:
        if not worth_notifying(alert, self.min_severity):
            return False
        record = logging.LogRecord(
            "nettrail.alerts", _LEVELS[alert.severity], __file__, 0, summary_line(alert), None, None
        )
        self.handler.emit(record)  # a UDP or unix datagram: never blocks for long
        return True

    def close(self) -> None:
        self.handler.close()


class Notifiers:
    """The channels the [notify] configuration enables, fed with every emitted alert."""

    def __init__(self, settings: Mapping[str, object]) -> None:
        level = str(settings["min_severity"])
        self.channels: list[WebhookNotifier | SyslogNotifier] = []
        if settings["webhook_url"]:
            self.channels.append(
                WebhookNotifier(
                    str(settings["webhook_url"]),
                    timeout_s=float(str(settings["webhook_timeout_s"])),
                    retries=int(str(settings["webhook_retries"])),
                    backoff_s=float(str(settings["webhook_backoff_s"])),
                    queue_size=int(str(settings["webhook_queue"])),
                    min_severity=level,
                )  # fmt: skip
            )
        if settings["syslog_address"]:
            self.channels.append(SyslogNotifier(str(settings["syslog_address"]), min_severity=level))
        # (host, alert_id) -> (severity, status) last notified: an alert's update versions
        # (its numbers re-emitted, book.py) are not news to a pager; its first version, a
        # rise in severity, a close and a reopen are (as for mail: webapp/traces/alert_mail.py)
        self._told: OrderedDict[tuple[str, str], tuple[str, str]] = OrderedDict()

    def _news(self, alert: Alert) -> bool:
        if alert.alert_id is None:
            return True
        key, now = (alert.host_id, alert.alert_id), (alert.severity, alert.status)
        if self._told.get(key) == now:
            return False
        self._told[key] = now
        self._told.move_to_end(key)
        if len(self._told) > MAX_TOLD:
            self._told.popitem(last=False)
        return True

    def submit(self, alert: Alert) -> None:
        if not self._news(alert):
            return
        for channel in self.channels:
            try:
                channel.submit(alert)
            except OSError as exc:  # syslog socket gone: log, never break the pipeline
                log.warning("notification through %s failed: %s", type(channel).__name__, exc)

    def close(self) -> None:
        for channel in self.channels:
            channel.close()
