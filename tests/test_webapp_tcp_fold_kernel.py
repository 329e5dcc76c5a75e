"""The same loopback connections traced by two sessions at once, streaming and folding
(tests/test_collect_tcp_fold.py's), each session's records stored through the ingest path
(store_batch) as a host of its own: every connection's row is the same from both (state,
direction, owner, counters, retransmits, resets, Zeek's conn_state and history, duration
to the session clocks' difference) and so are the connection page's timeline and the
open/close counters and the Zeek conn.log export.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from django.contrib.auth import get_user_model
from django.forms.models import model_to_dict
from django.test import Client

from tests.kernel_support import bound_listener, kernel
from tests.test_collect_tcp_fold import SHORT, exchange, two_sessions
from tests.test_zeek_conn_log import parse
from translators.kernel import as_struct
from translators.records import Record
from webapp.dashboard import detail, queries
from webapp.metrics.models import IngestCounter
from webapp.traces.models import Connection
from webapp.traces.store import store_batch

pytestmark = [*kernel, pytest.mark.django_db]
TIMES = ("first_seen", "last_seen", "state_ts_ns")  # each session's own clock
SAMPLED = ("srtt_us", "snd_cwnd")  # each session's own siftr-poll samples


def as_host(records: list[Any], host: str) -> list[Record]:
    return [msgspec.structs.replace(as_struct(r), host_id=host) for r in records]


def rows(host: str) -> dict[str, dict[str, Any]]:
    return {c.conn_uuid: model_to_dict(c) for c in Connection.objects.filter(host_id=host)}


def test_folded_and_streamed_records_make_the_same_connection_rows_pages_and_counts() -> None:
    listener = bound_listener()
    port = listener.getsockname()[1]
    with two_sessions(port, poll_interval=60.0) as (streamed, folded):
        listener.listen(SHORT + 1)
        ends = [exchange(listener, port) for _ in range(SHORT)]
        aborted = exchange(listener, port, linger0=True)
        listener.close()
        sockets = {c for pair in [*ends, aborted] for c in pair}
        for cap in (streamed, folded):
            cap.wait_for(lambda rs: sockets <= {r.sock_cookie for r in rs if r.kind in ("connection", "tcp_lifecycle")})
            cap.settle()
    store_batch(as_host(streamed.records, "streamed"))
    store_batch(as_host(folded.records, "folded"))
    want, got = rows("streamed"), rows("folded")
    assert sorted(got) == sorted(want)
    uuids = {r.conn_uuid for r in streamed.records if r.sock_cookie in sockets and r.conn_uuid is not None}
    assert len(uuids) == 2 * (SHORT + 1)
    for uuid in uuids:
        w, g = want[uuid], got[uuid]
        same = [k for k in w if k not in ("id", "host_id", *TIMES, *SAMPLED)]
        assert {k: g[k] for k in same} == {k: w[k] for k in same}, uuid
        # durations: the same to the clocks' difference over a connection (well under 5 ms)
        assert g["last_seen"] - g["first_seen"] == pytest.approx(w["last_seen"] - w["first_seen"], abs=5e-3)
        assert w["history"] and g["history"] == w["history"]
        page = [detail.timeline(Connection.objects.get(host_id=h, conn_uuid=uuid)) for h in ("streamed", "folded")]
        strip = [[{k: v for k, v in item.items() if k not in ("ts", "duration")} for item in p] for p in page]
        assert strip[0] == strip[1], uuid
    assert {r["state"] for r in got.values() if r["conn_uuid"] in uuids} == {"CLOSED"}
    counts = [
        {(c.metric, c.label): c.value for c in IngestCounter.objects.filter(host=h).exclude(metric="records_ingested")}
        for h in ("streamed", "folded")
    ]
    assert counts[0] == counts[1]
    # entered TIME_WAIT (the Overview's TIME_WAIT table, the `state TIME_WAIT` filter)
    entered = [
        set(Connection.objects.filter(queries.entered_time_wait(0.0), host_id=h).values_list("conn_uuid", flat=True))
        for h in ("streamed", "folded")
    ]
    assert entered[0] == entered[1] and len(entered[0] & uuids) == SHORT  # each client's end
    # the Zeek conn.log export: the folded sockets' summaries come from their lifecycles
    client = Client()
    client.force_login(get_user_model().objects.create_user("viewer"))
    logs = []
    for host in ("streamed", "folded"):
        resp = client.get("/api/report", {"host": host, "format": "zeek"})
        assert resp.status_code == 200
        lines = parse(b"".join(resp.streaming_content).decode())
        logs.append(sorted(({k: v for k, v in row.items() if k not in ("ts", "duration")} for row in lines), key=str))
    assert logs[0] == logs[1] and len(logs[0]) >= 2 * (SHORT + 1)
