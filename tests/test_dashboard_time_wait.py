"""TIME_WAIT by destination (issue 18 item 3): the Overview counts the sockets the filter
``state TIME_WAIT`` finds, per host and remote address:port, and each row's filter lists
exactly that many rows on the Connections page.

Ingested: on web1, three sockets to 10.9.0.9:7950 and two to 10.9.0.8:443 that entered
TIME_WAIT seconds ago (then the tracer's inferred CLOSED, as the kernel records it), one
to 10.9.0.9:7950 that entered it two minutes ago (gone from ss) and one still
ESTABLISHED there, and one of the collector's own sockets (pid of web1's
collector_status) in TIME_WAIT toward 10.9.0.9:7950; on db1, two sockets to 10.9.0.9:7950.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from translators.records import CollectorStatus, Record, TcpStateChange, connection_uuid
from webapp.dashboard import time_wait
from webapp.traces.store import store_batch
from webapp.traces.tokens import create_token

pytestmark = pytest.mark.django_db
WEB, DB, BOOT = "web1", "db1", "boot-tw"
COLLECTOR_PID = 31_337
_seq = itertools.count(1)
_cookie = itertools.count(100)


def socket(host: str, dst: str, dport: int, states: tuple[str, ...], entered: float, pid: int = 4242) -> list[Record]:
    """One client socket's state changes, the last one at `entered`."""
    cookie = next(_cookie)
    base: dict[str, Any] = {
        "host_id": host, "boot_id": BOOT, "provider": "tcp", "probe": "state-change",
        "conn_uuid": connection_uuid(host, BOOT, cookie), "ip_ver": 4, "src": "10.9.0.1", "sport": 30000 + cookie,
        "dst": dst, "dport": dport, "comm": "client", "pid": pid, "tgid": pid,
    }  # fmt: skip
    out: list[Record] = []
    prev = "CLOSED"
    for i, state in enumerate(states):
        t = entered - (len(states) - 1 - i) * 1e-3 if state != "CLOSED" else entered + 1e-6
        out.append(
            TcpStateChange(
                **base,
                seq=next(_seq),
                ts_ns=int(t * 1e9),
                ts_wall=t,
                prev_state=prev,
                state=state,
                inferred=state == "CLOSED",
            )  # fmt: skip
        )
        prev = state
    return out


CLOSED_AFTER_TIME_WAIT = ("SYN_SENT", "ESTABLISHED", "FIN_WAIT_1", "FIN_WAIT_2", "TIME_WAIT", "CLOSED")


@pytest.fixture()
def stored() -> None:
    now = time.time()
    create_token(WEB)
    create_token(DB)
    records: list[Record] = [
        CollectorStatus(
            host_id=WEB,
            boot_id=BOOT,
            seq=next(_seq),
            ts_ns=1,
            ts_wall=now - 100,
            provider="nettrail",
            probe="status",
            providers=["tcp"],
            attached={},
            pid=COLLECTOR_PID,
            comm="nettrail",
        )  # fmt: skip
    ]
    for _ in range(3):
        records += socket(WEB, "10.9.0.9", 7950, CLOSED_AFTER_TIME_WAIT, now - 5)
    for _ in range(2):
        records += socket(WEB, "10.9.0.8", 443, CLOSED_AFTER_TIME_WAIT, now - 3)
    records += socket(WEB, "10.9.0.9", 7950, CLOSED_AFTER_TIME_WAIT, now - 120)  # TIME_WAIT over: not counted
    records += socket(WEB, "10.9.0.9", 7950, ("SYN_SENT", "ESTABLISHED"), now - 2)  # still open: not counted
    records += socket(WEB, "10.9.0.9", 7950, CLOSED_AFTER_TIME_WAIT, now - 4, pid=COLLECTOR_PID)  # nettrail's own
    for _ in range(2):
        records += socket(DB, "10.9.0.9", 7950, CLOSED_AFTER_TIME_WAIT, now - 6)
    store_batch(records)


def test_time_wait_is_counted_per_host_and_destination_and_each_filter_lists_that_many(stored: None) -> None:
    rows = time_wait.by_destination([WEB, DB])
    assert [(r["host_id"], r["dst"], r["dport"], r["sockets"]) for r in rows] == [
        (WEB, "10.9.0.9", 7950, 3),
        (DB, "10.9.0.9", 7950, 2),  # equal counts: by host, then destination
        (WEB, "10.9.0.8", 443, 2),
    ]
    assert rows[0]["q"] == "host web1 and state TIME_WAIT and dst 10.9.0.9 and dport 7950"
    # one host asked for: that host's rows only
    assert [(r["host_id"], r["sockets"]) for r in time_wait.by_destination([DB])] == [(DB, 2)]

    client = Client()
    client.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    for row in rows:
        listed = client.get("/api/dash/connections", {"q": row["q"], "limit": 200}).json()
        assert listed["total"] == row["sockets"]
        assert {(c["host_id"], c["dst"], c["dport"]) for c in listed["rows"]} == {
            (row["host_id"], row["dst"], row["dport"])
        }
    overview = client.get("/api/dash/overview").json()
    assert overview["time_wait"] == rows


def test_a_value_the_filter_language_cannot_read_bare_is_quoted() -> None:
    assert (
        time_wait.link_filter("edge (2)", "fd00::1", 53)
        == 'host "edge (2)" and state TIME_WAIT and dst fd00::1 and dport 53'
    )
