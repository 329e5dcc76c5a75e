"""Six findings of issue 34, made by the real rule engine from synthetic records (the unit
tests' builders: tests/test_alerts_*.py), for the browser test that reaches each from the
Overview (test_dashboard_findings_reach.py).

The records are the ones each rule's unit test feeds (a refused service, a full listener
and the connects it times out, a CLOSE_WAIT leak, a UDP socket whose buffer overflows,
connects whose SYNs a firewall drops); the alerts are the engine's own, with their words,
numbers and member sockets. Both are moved to the browser host and to "now", and the
alerts' seqs are made unique across the engine's sessions.
Keep in sync with: tests/test_alerts_reset_causes.py, test_alerts_listen_overflow.py,
test_alerts_grouping.py, test_alerts_buffers.py, test_alerts_connect_causes.py.
"""

from __future__ import annotations

import time
from typing import TypeVar

import msgspec

from tests.alert_streams import Stream, engine, feed_all
from tests.test_alerts_connect_causes import attempt
from tests.test_alerts_grouping import leak
from tests.test_alerts_listen_overflow import read
from tests.test_alerts_reset_causes import refused
from translators.records import Alert, Record, connection_uuid

R = TypeVar("R", bound=Record)

RULES = {
    "K3": {"peer_min_connections": 2},
    "K14": {"min_attempts": 2},
    "K10": {"close_wait_s": 2, "sweep_s": 1},
}


def _scenarios(s: Stream) -> list[Record]:
    recs: list[Record] = []
    # K3: a service refused twice, its own stack's RSTs seen with their reason
    recs += refused(s, s.flow(dport=81), stack_first=True) + refused(s, s.flow(dport=81), stack_first=False)
    s.advance(5)
    # K10: 200 sockets of one process left in CLOSE_WAIT
    leaked, _ = leak(s, 200)
    recs += leaked
    s.advance(4)
    # K14: connects whose SYNs a firewall of this host drops
    recs += attempt(s, s.flow(dport=82), drops=1) + attempt(s, s.flow(dport=82), drops=1)
    s.advance(5)
    # K11: a UDP socket whose 256 KiB buffer overflows while its reader is slow
    for _ in range(20):
        recs.append(s.udp("10.0.0.9", 5000, "10.0.0.2", 5353, probe="receive"))
        recs.append(s.sock("udp-fail-queue", "udp", "10.0.0.2", 5353, rc=-12, rcvbuf=262144, rmem_alloc=262400,
                           truesize=2304, pid=900, tgid=900, comm="udpsrv"))  # fmt: skip
        s.advance(0.05)
    s.advance(5)
    # K4 and K8: a full listener; a connect toward it times out (last: their findings stay open)
    f = s.flow(dst="10.9.0.2", dport=8080)
    recs.append(s.state(f, "CLOSED", "SYN_SENT"))
    s.advance(0.5)
    recs += read(s, (3, 3), (3, 3))
    s.advance(6.0)
    recs.append(s.state(f, "SYN_SENT", "CLOSED"))
    return recs


def story(host: str, boot: str) -> tuple[list[Record], list[Alert]]:
    """The records and the newest version of each alert the engine raised on them."""
    s = Stream(t=time.time() - 120)
    recs = _scenarios(s)
    e = engine(**RULES)
    alerts = feed_all(e, recs) + e.tick(s.t) + e.tick(s.t + 1)
    newest: dict[str | None, Alert] = {}
    for a in alerts:
        newest[a.alert_id] = a
    # conn_uuids are derived from (host, boot, cookie): the browser host's own
    ids: dict[str, str] = {}
    for r in recs:
        uuid, cookie = getattr(r, "conn_uuid", None), getattr(r, "sock_cookie", None)
        if uuid is not None and cookie is not None:
            ids[uuid] = connection_uuid(host, boot, cookie)
    moved = [_moved(r, host, boot, ids) for r in recs]
    out = [
        msgspec.structs.replace(
            _moved(a, host, boot, ids), seq=s.seq + 1 + i, member_conn_uuids=[ids[u] for u in a.member_conn_uuids]
        )
        for i, a in enumerate(newest.values())
    ]
    return moved, out


def _moved(r: R, host: str, boot: str, ids: dict[str, str]) -> R:
    uuid = getattr(r, "conn_uuid", None)
    if uuid is None:
        return msgspec.structs.replace(r, host_id=host, boot_id=boot)
    return msgspec.structs.replace(r, host_id=host, boot_id=boot, conn_uuid=ids[uuid])
