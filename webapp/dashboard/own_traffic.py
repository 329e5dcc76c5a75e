"""nettrail's own traffic: which connections are the dashboard watching itself.

The webapp's sockets, the browser viewing it and the collector's ingest made most rows of
the Connections page (issue 18 item 2). They are told apart by identity, not by guessing
ports: a collector's own process is the pid of its ``collector_status`` records (the
envelope's pid; every run) on its host; the webapp knows its own pid and the address it listens on
(``webapp.serve`` exports ``NETTRAIL_WEBAPP_LISTEN``), and those apply to the hosts whose
collector runs on this very machine (the same kernel boot id). A connection is nettrail's
own when its process is one of those, or one of its ends is the webapp's listening socket
on this machine. Keep in sync with: webapp/serve.py, api.connections, js/connections.js.
"""

from __future__ import annotations

import ipaddress
import os
from pathlib import Path

from django.db.models import Q

from webapp.dashboard.tables import CollectorStatus

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
