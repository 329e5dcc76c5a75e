"""tcp --tcp-fold in the webapp (webapp/traces/folded.py): a connection whose records arrived
as a stored tcp_lifecycle shows the same row (lifecycle, counters, duration, owner), the
same timeline on its page and the same metric counts as the same connection streamed, i.e.
stored as the records expand() gives (which tests/test_collect_tcp_fold.py proves equal to
what the kernel streams for the same socket).
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from django.forms.models import model_to_dict
from record_samples import full_record

from translators import records as r
from translators.tcp_lifecycle import expand
from webapp.dashboard import detail, queries
from webapp.metrics.models import IngestCounter
from webapp.traces.models import Connection
from webapp.traces.store import store_batch

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
BOOT = "boot-1"
SERVER = {  # the passive end of the same exchange (record_samples' is the client's)
    "state_path": "SYN_RECEIVED ESTABLISHED CLOSE_WAIT LAST_ACK CLOSED",
    "prev_state": "LISTEN",
    "linux_prev_state": 10,
    "linux_states": [3, 1, 8, 9, 7],
    "state_ctx": ["softirq", "softirq", "softirq", "task", "softirq"],
    "time_wait": False,
}


def lifecycle(host: str, uuid: str, seq: int, **kw: Any) -> r.TcpLifecycle:
    rec = full_record(r.TcpLifecycle, host_id=host, boot_id=BOOT, conn_uuid=uuid, seq=seq, **kw)
    assert isinstance(rec, r.TcpLifecycle)
    return rec


def streamed(rec: r.TcpLifecycle, host: str, seq: int) -> list[r.Record]:
    """The records the same socket streams without the fold, as another host's."""
    out = expand(rec)
    for i, part in enumerate(out):
        part.host_id, part.seq = host, seq + i
    return out


def row(host: str) -> dict[str, Any]:
    conn = Connection.objects.get(host_id=host)
    return {k: v for k, v in model_to_dict(conn).items() if k not in ("id", "host_id")}


def counters(host: str) -> dict[tuple[str, str], int]:
    rows = IngestCounter.objects.filter(host=host).exclude(metric="records_ingested")
    return {(c.metric, c.label): c.value for c in rows}


@pytest.mark.parametrize("side", ["client", "server"])
def test_a_folded_connection_shows_the_same_row_timeline_and_counts_as_streamed(side: str) -> None:
    kw = SERVER if side == "server" else {}
    folded = lifecycle("folded", "conn-1", 1, **kw)
    store_batch([folded])
    store_batch(streamed(folded, "streamed", 1))
    got, want = row("folded"), row("streamed")
    assert got == want
    assert got["state"] == "CLOSED" and got["closed"] is True
    assert got["last_seen"] - got["first_seen"] == pytest.approx(folded.ts_wall - folded.start)  # type: ignore[operator]
    assert (got["bytes_out"], got["comm"]) == (folded.bytes_sent, folded.comm)
    pages = [detail.timeline(Connection.objects.get(host_id=h)) for h in ("folded", "streamed")]
    assert pages[0] == pages[1]
    assert [item["state"] for item in pages[0]][-2:] == (
        ["TIME_WAIT", "CLOSED"] if side == "client" else ["LAST_ACK", "CLOSED"]
    )
    assert counters("folded") == counters("streamed") == {
        ("connections_opened", ""): 1, ("connections_closed", ""): 1,
    }  # fmt: skip


def test_a_partial_lifecycle_then_streamed_changes_fold_into_one_row() -> None:
    """A socket flushed past the window (partial: its changes so far) streams the rest."""
    whole = lifecycle("whole", "conn-2", 1)
    store_batch(streamed(whole, "streamed", 1))
    changes = [p for p in expand(whole) if p.kind == "tcp_state"]
    partial = msgspec.structs.replace(
        whole, host_id="split", partial=True, linux_states=whole.linux_states[:2], state_us=whole.state_us[:2],
        state_ctx=whole.state_ctx[:2], state_error=whole.state_error[:2], state="ESTABLISHED",
        ts_ns=changes[2].ts_ns - 1, ts_wall=changes[2].ts_wall - 1e-9,
    )  # fmt: skip  # flushed just before the third change
    rest = [p for p in streamed(whole, "split", 10) if p.ts_ns > partial.ts_ns]
    assert [p.kind for p in rest][:: len(rest) - 1] == ["tcp_state", "connection"]
    store_batch([partial])
    store_batch(rest)
    assert row("split") == row("streamed")


def test_a_resent_lifecycle_counts_once() -> None:
    rec = lifecycle("folded", "conn-3", 1)
    store_batch([rec])
    store_batch([rec])
    assert Connection.objects.get(host_id="folded").bytes_out == rec.bytes_sent
    assert counters("folded")[("connections_opened", "")] == 1


def test_a_folded_client_entered_time_wait_as_the_streamed_one_did() -> None:
    """The Overview's TIME_WAIT table and the `state TIME_WAIT` filter count a connection
    stored CLOSED that entered TIME_WAIT lately (queries.entered_time_wait): a folded one by
    its lifecycle's time_wait."""
    client, server = lifecycle("folded", "conn-c", 1), lifecycle("folded", "conn-s", 2, **SERVER)
    assert (client.time_wait, server.time_wait) == (True, False)
    store_batch([client, server])
    store_batch(streamed(client, "streamed", 1) + streamed(server, "streamed", 20))
    since = (client.start or 0) - 1
    entered = Connection.objects.filter(queries.entered_time_wait(since))
    assert sorted(entered.values_list("host_id", "conn_uuid")) == [("folded", "conn-c"), ("streamed", "conn-c")]
    later = Connection.objects.filter(queries.entered_time_wait(client.ts_wall + 1))
    assert not later.exists()
