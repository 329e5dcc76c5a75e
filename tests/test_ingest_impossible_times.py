"""Impossible times are refused at ingest with a 400 naming the record and field, and
nothing of the batch is stored (webapp/traces/timestamps.py, issue 33 item 6): a wall
clock before 2000 or more than a day ahead of the server's, a kernel clock below 0 or
over 100 years. Plausible times at the edges of that window are stored.
tests/test_capture_impossible_times.py has the upload and the file imports.
"""

# ruff: noqa: F811 -- pytest fixtures imported from webapp_cast are redefined as test arguments

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import msgspec
import pytest
import redis
from django.test import Client, override_settings
from redis_server import RedisServer
from webapp_cast import Cast, cast, env, post, retransmit  # noqa: F401 (cast is a fixture)

from translators import records as r
from webapp.bus import streams
from webapp.traces.models import Alert, Connection, TcpRetransmit
from webapp.traces.timestamps import KERNEL_NS_MAX

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
DAY = 86_400.0
BEFORE_2000 = "s since the epoch is before 2000-01-01T00:00:00Z"
AHEAD = re.compile(r"s since the epoch is after (\S+)Z, a day ahead of the server's clock")


def raw_record(seq: int, **fields: Any) -> dict[str, Any]:
    """A record as a msgpack map, so any value can be sent."""
    return {**msgspec.to_builtins(retransmit("host-a", seq)), **fields}


def refusal(resp: Any, index: int, field: str) -> str:
    """The reason of a 400 naming record `index` and `field`, after checking both."""
    body = resp.json()
    assert (resp.status_code, body["index"], body["field"]) == (400, index, field)
    prefix = f"record {index}: {field}: "
    assert body["error"].startswith(prefix)
    return str(body["error"][len(prefix) :])


def assert_nothing_stored() -> None:
    assert (TcpRetransmit.objects.count(), Connection.objects.count(), Alert.objects.count()) == (0, 0, 0)


@pytest.mark.parametrize(
    ("field", "value", "why"),
    [
        ("ts_wall", -1e300, f"-1e+300 {BEFORE_2000}"),
        ("ts_wall", 946_684_799.0, f"946684799.0 {BEFORE_2000}"),  # 1999-12-31T23:59:59Z
        ("ts_wall", 0.0, f"0.0 {BEFORE_2000}"),
        ("ts_ns", -(2**62), "-4611686018427387904 ns is negative"),
        ("ts_ns", -1, "-1 ns is negative"),
        ("ts_ns", KERNEL_NS_MAX + 1, "3155760000000000001 ns is more than 100 years"),
    ],
)
def test_ingest_refuses_a_time_from_before_2000_or_a_negative_kernel_clock(
    cast: Cast, field: str, value: Any, why: str
) -> None:
    batch = [raw_record(1), raw_record(2, **{field: value})]
    resp = post(Client(), cast.token_a, msgspec.msgpack.encode(batch))
    assert refusal(resp, 1, field) == why
    assert_nothing_stored()


@pytest.mark.parametrize("ahead", [1e300, 2 * DAY, DAY + 60])
def test_ingest_refuses_a_wall_time_more_than_a_day_ahead_of_the_servers_clock(cast: Cast, ahead: float) -> None:
    sent = time.time() + ahead if ahead < 1e299 else ahead
    before = time.time()
    resp = post(Client(), cast.token_a, msgspec.msgpack.encode([raw_record(1, ts_wall=sent)]))
    after = time.time()
    why = AHEAD.fullmatch(refusal(resp, 0, "ts_wall").removeprefix(f"{sent!r} "))
    assert why is not None
    limit = datetime.fromisoformat(why[1] + "+00:00").timestamp()  # the server's now + a day, in whole seconds
    assert int(before + DAY) <= limit <= after + DAY
    assert_nothing_stored()


def test_ingest_stores_times_at_the_edges_of_the_window(cast: Cast) -> None:
    batch = [
        raw_record(1, ts_wall=946_684_800.0, ts_ns=0),  # 2000-01-01T00:00:00Z, the kernel's first ns
        raw_record(2, ts_wall=time.time() + DAY - 60, ts_ns=KERNEL_NS_MAX),  # a clock 23:59 ahead
        raw_record(3, ts_wall=time.time(), ts_ns=time.monotonic_ns()),
    ]
    resp = post(Client(), cast.token_a, msgspec.msgpack.encode(batch))
    assert (resp.status_code, resp.json()) == (200, {"stored": 3, "duplicates": 0, "tracing": None})
    assert sorted(TcpRetransmit.objects.values_list("seq", flat=True)) == [1, 2, 3]


def alert(seq: int, start: float, end: float | None) -> r.Alert:
    return r.Alert(
        **env("host-a", seq), provider="nettrail", probe="alert", rule_id="K1", severity="warning",
        start=start, end=end, message="retransmissions",
    )  # fmt: skip


def test_ingest_refuses_an_alert_whose_start_or_end_is_impossible_naming_the_field(cast: Cast) -> None:
    now = time.time()
    bad_start = post(Client(), cast.token_a, [alert(1, now, now), alert(2, 1e300, None)])
    assert refusal(bad_start, 1, "start").startswith("1e+300 s since the epoch is after ")
    bad_end = post(Client(), cast.token_a, [alert(3, now, -1e300)])
    assert refusal(bad_end, 0, "end") == f"-1e+300 {BEFORE_2000}"
    assert_nothing_stored()
    assert post(Client(), cast.token_a, [alert(4, now - 60, now)]).status_code == 200


def test_ingest_refuses_a_connection_finding_at_an_impossible_time_naming_it(cast: Cast) -> None:
    finding = r.Finding(kind="reset", severity="warning", message="reset by the responder", ts=5.0)
    conn = r.Connection(
        **env("host-a", 1), provider="tcp", probe="connection", proto="tcp", start=time.time(),
        findings=[r.Finding(kind="reset", severity="info", message="ok", ts=time.time()), finding],
    )  # fmt: skip
    resp = post(Client(), cast.token_a, [conn])
    assert refusal(resp, 0, "findings[1].ts") == f"5.0 {BEFORE_2000}"
    assert_nothing_stored()


def test_ingest_refuses_an_ip_flow_whose_kernel_times_are_negative(cast: Cast) -> None:
    flow = r.IpFlowCounters(
        **env("host-a", 1), provider="ip", probe="flow-counters", direction="send", if_index=1, protocol=6,
        packets=1, bytes=60, packets_delta=1, bytes_delta=60, start_ts_ns=5, end_ts_ns=-(2**62),
    )  # fmt: skip
    resp = post(Client(), cast.token_a, [flow])
    assert refusal(resp, 0, "end_ts_ns") == "-4611686018427387904 ns is negative"


@pytest.fixture
def bus() -> Iterator[redis.Redis]:
    """Scale-out ingest (REDIS_URL) on a redis-server of its own."""
    server = RedisServer()
    server.start()
    streams.client.cache_clear()
    try:
        with override_settings(NETTRAIL_REDIS_URL=server.url):
            yield redis.Redis.from_url(server.url)
    finally:
        streams.client.cache_clear()
        server.close()


def test_with_the_redis_bus_the_batch_is_refused_before_it_reaches_the_stream(cast: Cast, bus: redis.Redis) -> None:
    resp = post(Client(), cast.token_a, msgspec.msgpack.encode([raw_record(1), raw_record(2, ts_wall=-1e300)]))
    assert refusal(resp, 1, "ts_wall") == f"-1e+300 {BEFORE_2000}"
    assert bus.xlen(streams.STREAM) == 0  # no writer ever sees it: the collector keeps it in rejected/
    good = post(Client(), cast.token_a, msgspec.msgpack.encode([raw_record(3, ts_wall=time.time())]))
    assert (good.status_code, good.json()["queued"], bus.xlen(streams.STREAM)) == (200, True, 1)
