"""Alerts about nettrail's own traffic are not mailed (issue 18 item 2), by the identity the
alert views use (webapp/dashboard/own_traffic.py), while any other alert still is.

host-a's collector_status says its collector is pid 38888 and runs on this machine (this
kernel's boot id); the webapp listens on 127.0.0.1:18830 (NETTRAIL_WEBAPP_LISTEN, as
webapp.serve exports it). Ingested: a K7 about the collector's own ingest socket (its
pid), a K7 about the browser's socket toward the webapp's port, and a K1 about iperf3.
Django's test mail outbox gets the K1 only, from ingest and from a scale-out writer
(webapp/bus, a real Redis); the same records through the alert views show the same split.
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client, override_settings
from redis_server import RedisServer
from webapp_cast import BOOT, T0, Cast, cast, post  # noqa: F401 (cast is a fixture)

from translators.records import Alert, CollectorStatus
from webapp.bus import streams
from webapp.bus.writer import Writer
from webapp.dashboard import own_traffic
from webapp.dashboard.tables import Alert as AlertRow
from webapp.traces.alert_mail import MAILER

pytestmark = pytest.mark.django_db

COLLECTOR_PID = 38_888
WEBAPP_PORT = 18_830


def _alert(seq: int, rule: str, comm: str, pid: int, sport: int, dport: int, message: str) -> Alert:
    return Alert(
        host_id="host-a", boot_id=BOOT, seq=(1 << 61) + seq, ts_ns=seq, ts_wall=T0 + 1000 + seq, provider="nettrail",
        probe="alert", comm=comm, pid=pid, tgid=pid, src="127.0.0.1", sport=sport, dst="127.0.0.1", dport=dport,
        rule_id=rule, alert_id=f"own-mail-{seq}", severity="warning", status="open", proto="tcp", start=T0 + 1000,
        message=message,
    )  # fmt: skip


def _batch(first: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], Alert]:
    """The collector_status and the three alerts (seq from `first`); returns the K1 too."""
    monkeypatch.setenv("NETTRAIL_ALERT_EMAILS", "ops@example.test")
    monkeypatch.setenv("NETTRAIL_WEBAPP_LISTEN", f"127.0.0.1:{WEBAPP_PORT}")
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    status = CollectorStatus(
        host_id="host-a", boot_id=boot, seq=first, ts_ns=1, ts_wall=T0 + 500, provider="nettrail", probe="status",
        providers=["tcp"], attached={}, pid=COLLECTOR_PID, comm="nettrail",
    )  # fmt: skip
    n = first + 1
    ingest = _alert(n, "K7", "nettrail", COLLECTOR_PID, 51_001, 9_999, "smoothed RTT of nettrail toward its server")
    browser = _alert(
        n + 1, "K7", "Chrome_ChildIOT", 61_234, 51_000, WEBAPP_PORT, f"smoothed RTT of Chrome toward :{WEBAPP_PORT}"
    )
    other = _alert(n + 2, "K1", "iperf3", 61_235, 51_002, 5_201, "40 of 1000 segments retransmitted (4.0%) by iperf3")
    return [status, ingest, browser, other], other


def test_an_alert_about_nettrails_own_sockets_sends_no_mail_and_another_alert_does(
    cast: Cast, mailoutbox: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    batch, other = _batch(1, monkeypatch)
    assert post(Client(), cast.token_a, batch).json() == {"stored": 4, "duplicates": 0, "tracing": None}
    MAILER.join()

    assert [m.subject for m in mailoutbox] == ["[nettrail] warning K1 on host-a (open)"]
    assert other.message in mailoutbox[0].body and mailoutbox[0].to == ["ops@example.test"]
    # the same split as the alert views make (they exclude own_alert_q())
    shown = AlertRow.objects.exclude(own_traffic.own_alert_q()).filter(host_id="host-a")
    assert sorted(shown.values_list("message", flat=True)) == [other.message]


def test_without_the_collectors_identity_the_same_alert_is_mailed(
    cast: Cast, mailoutbox: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule is identity, not the alert's text or port: with no collector_status naming
    pid 38888, the ingest socket's K7 is an ordinary alert and is mailed."""
    monkeypatch.setenv("NETTRAIL_ALERT_EMAILS", "ops@example.test")
    monkeypatch.delenv("NETTRAIL_WEBAPP_LISTEN", raising=False)
    ingest = _alert(11, "K7", "nettrail", COLLECTOR_PID, 51_011, 9_999, "smoothed RTT of nettrail toward its server")
    assert post(Client(), cast.token_a, [ingest]).status_code == 200
    MAILER.join()
    assert [m.subject for m in mailoutbox] == ["[nettrail] warning K7 on host-a (open)"]


@pytest.mark.postgres
def test_a_scale_out_writer_mails_by_the_same_rule(
    cast: Cast, mailoutbox: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With REDIS_URL the batch goes through the ingest stream; the writer that stores it
    mails after the commit (webapp/bus/writer.py), and leaves out the same two alerts."""
    server = RedisServer()
    server.start()
    streams.client.cache_clear()
    try:
        with override_settings(NETTRAIL_REDIS_URL=server.url):
            batch, other = _batch(21, monkeypatch)
            assert post(Client(), cast.token_a, batch).json()["queued"] is True
            assert mailoutbox == []  # nothing stored yet, nothing mailed
            streams.ensure_group()
            assert Writer(name="w-mail", block_ms=10).step() == 1
            MAILER.join()
    finally:
        streams.client.cache_clear()
        server.close()
    assert [m.subject for m in mailoutbox] == ["[nettrail] warning K1 on host-a (open)"]
    assert other.message in mailoutbox[0].body


def test_the_children_of_nettrail_serve_know_the_webapps_address() -> None:
    """A scale-out writer runs in a process of its own: the cluster hands every child the
    listening address, so the writer's mail filter knows the browser's sockets as ingest's
    does (a worker on the inherited socket keeps it instead of its default --port)."""
    import socket as sockets

    from webapp.bus.cluster import Cluster

    with sockets.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cluster = Cluster("127.0.0.1", port, workers=0, writers=0, env={"PATH": "/usr/bin"})
    cluster.start()
    try:
        assert cluster.env == {"PATH": "/usr/bin", "NETTRAIL_WEBAPP_LISTEN": f"127.0.0.1:{port}"}
    finally:
        cluster.stop()
