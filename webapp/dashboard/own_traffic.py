"""nettrail's own traffic: which connections are the dashboard watching itself.

The webapp's sockets, the browser viewing it and the collector's ingest made most rows of
the Connections page (issue 18 item 2). They are told apart by identity, not by guessing
ports: a collector's own process is the pid of its ``collector_status`` records (the
envelope's pid; every run) on its host; the webapp knows its own pid and the address it listens on
(``webapp.serve`` exports ``NETTRAIL_WEBAPP_LISTEN``), and those apply to the hosts whose
collector runs on this very machine (the same kernel boot id). A connection is nettrail's
own when its process is one of those, or one of its ends is the webapp's listening socket
on this machine. Alerts about such traffic (the browser's K7 "smoothed RTT ... toward the
dashboard port") are left out of the alert views by the same identity: an alert is
nettrail's own when its connection is, or when its own process and address fields (an
alert record carries them as a connection row does) match the same conditions. Alert e-mail (webapp/traces/alert_mail.py) leaves out the same
alerts, through ``own_alerts`` below, so the browser viewing the dashboard mails nobody.
Keep in sync with: webapp/serve.py, api.connections, api.alerts, api.overview, js/connections.js,
webapp/traces/alert_mail.py.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Collection
from pathlib import Path

from django.db.models import Exists, OuterRef, Q

from webapp.dashboard.tables import Alert, CollectorStatus
from webapp.traces.models import Connection

BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def _this_boot() -> str | None:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return None


def _listen() -> tuple[str | None, int] | None:
    """The webapp's listening (address, port); address None for a wildcard listener."""
    raw = os.environ.get("NETTRAIL_WEBAPP_LISTEN", "")
    host, _, port = raw.rpartition(":")
    if not port.isdigit():
        return None
    host = host.strip("[]")
    try:
        wildcard = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        wildcard = host in ("", "localhost")
    return (None if wildcard else host), int(port)


def own_q() -> Q:
    """Connections that are nettrail's own (an empty match when nothing is known)."""
    q = Q(pk__in=[])
    boot = _this_boot()
    local: list[str] = []
    # Every collector run counts (a restart leaves the old run's sockets in the table too).
    pairs = CollectorStatus.objects.values_list("host_id", "pid", "boot_id").distinct()
    for host, pid, boot_id in pairs:
        if pid is not None:  # the collector's own sockets (its ingest to the webapp)
            q |= Q(host_id=host) & (Q(tgid=pid) | Q(tgid__isnull=True, pid=pid))
        if boot is not None and boot_id == boot and host not in local:
            local.append(host)
    if local:
        me = os.getpid()
        q |= Q(host_id__in=local) & (Q(tgid=me) | Q(tgid__isnull=True, pid=me))
        listen = _listen()
        if listen is not None:
            addr, port = listen
            ends = (
                (Q(sport=port) | Q(dport=port)) if addr is None else (Q(src=addr, sport=port) | Q(dst=addr, dport=port))
            )
            q |= Q(host_id__in=local) & ends
    return q


def own_alert_q() -> Q:
    """Alerts about nettrail's own traffic: their connection is one of own_q()'s, or the
    alert's own pid/address fields match own_q() directly (an alert without a stored
    connection row, e.g. one that fired before the connection's first record arrived)."""
    own = own_q()
    same_conn = Connection.objects.filter(own, host_id=OuterRef("host_id"), conn_uuid=OuterRef("conn_uuid"))
    return own | (Q(conn_uuid__isnull=False) & Q(Exists(same_conn)))


AlertKey = tuple[str, str, int]  # (host_id, boot_id, seq): a stored record's identity


def own_alerts(keys: Collection[AlertKey]) -> set[AlertKey]:
    """Which of these stored alert records are about nettrail's own traffic: own_alert_q()
    applied to their rows, so mail and the alert views can never disagree about one."""
    if not keys:
        return set()
    rows = Alert.objects.filter(
        own_alert_q(), host_id__in={k[0] for k in keys}, seq__in={k[2] for k in keys}
    ).values_list("host_id", "boot_id", "seq")
    return {(h, b, s) for h, b, s in rows} & set(keys)
