"""Each data page names what its counts are short by (webapp/dashboard/page_losses.py):
the loss reports of its own record kinds and those of every kind (a skipped program run,
the sink's spool, a refused batch), per host, summed; none of another page's kinds."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from translators.records import LossReport
from webapp.dashboard import page_losses
from webapp.traces.models import KIND_MODELS, Host, Trimmed
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db

RING = ("loss", "map/counters")


def loss(host: str, seq: int, probe: str, hook: str, kind: str, lost: int) -> LossReport:
    return LossReport(
        host_id=host, boot_id="b", seq=seq, ts_ns=seq, ts_wall=1_700_000_000.0 + seq, provider="nettrail",
        probe=probe, hook=hook, event_type=kind, lost=lost, lost_total=lost,
    )  # fmt: skip


@pytest.fixture()
def client() -> Client:
    for name in ("a", "b"):
        Host.objects.create(name=name)
    store_batch([
        loss("a", 1, *RING, "udp_datagram", 7),
        loss("a", 2, *RING, "udp_datagram", 5),  # summed with the first
        loss("a", 3, *RING, "skb_drop", 3),
        loss("a", 4, "skipped", "prog/net_dev_queue", "net_dev_queue runs", 4),
        loss("a", 5, "evicted", "map/ip_flows", "ip_flow_counters", 6),
        loss("b", 1, "loss", "sink/spool", "spool", 2),
        loss("b", 2, "malformed", "decode", "tcp_state", 1),
        loss("b", 3, "loss", "sink/rejected", "rejected", 9),
        loss("b", 4, *RING, "siftr_sample", 0),  # nothing lost in that report
    ])  # fmt: skip
    c = Client()
    c.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    return c


def lines(page: str, host: str | None = None) -> list[tuple[str, int, str]]:
    return [(r["host_id"], r["lost"], r["what"]) for r in page_losses.for_page(page, host)]


ANY_KIND = [
    ("b", 9, "records of any kind refused by the server"),
    ("a", 4, "net_dev_queue runs skipped by the kernel (their events neither recorded nor counted)"),
    ("b", 2, "records of any kind lost: the collector's spool was full"),
]


def test_each_page_lists_its_own_kinds_and_those_of_every_kind_largest_first(client: Client) -> None:
    assert lines("udp") == [("a", 12, "udp_datagram events lost: the ring buffer was full"), *ANY_KIND]
    assert lines("buffers") == [ANY_KIND[0], ANY_KIND[1], ("a", 3, "skb_drop events lost: the ring buffer was full"), ANY_KIND[2]]  # fmt: skip
    assert lines("counters") == [ANY_KIND[0], ("a", 6, "ip_flow_counters lost: evicted from the kernel's map"), *ANY_KIND[1:]]  # fmt: skip
    assert lines("connections") == [*ANY_KIND, ("b", 1, "tcp_state events lost: they could not be decoded")]


def test_a_host_filter_keeps_that_hosts_losses_only(client: Client) -> None:
    assert lines("udp", "a") == [
        ("a", 12, "udp_datagram events lost: the ring buffer was full"),
        ANY_KIND[1],
    ]
    assert lines("udp", "c") == []


def test_a_connections_page_counts_what_its_host_lost_while_it_was_open(client: Client) -> None:
    t0 = 1_700_000_000.0
    # host b's reports at t0+1 (spool), +2 (malformed tcp_state), +3 (rejected): a connection
    # open at t0+1.5 only sees those after, up to REPORT_LAG_S after its last record
    open_at = (t0 + 1.5, t0 + 1.5)
    assert [(r["lost"], r["what"]) for r in page_losses.for_page("connections", "b", open_at)] == [
        (9, "records of any kind refused by the server"),
        (1, "tcp_state events lost: they could not be decoded"),
    ]
    later = t0 + 3 + page_losses.REPORT_LAG_S + 0.5  # opened after the last report's lag
    assert page_losses.for_page("connections", "b", (later, later + 10)) == []
    before = t0 + 1 - page_losses.REPORT_LAG_S - 0.5  # closed more than the lag before the first
    assert page_losses.for_page("connections", "b", (before - 10, before)) == []


def test_a_report_without_a_hook_is_listed_as_it_is(client: Client) -> None:
    bare = LossReport(
        host_id="a", boot_id="b", seq=99, ts_ns=99, ts_wall=1.0, provider="nettrail", probe="loss",
        event_type="udp_datagram", lost=1, lost_total=1,
    )  # fmt: skip
    store_batch([bare])
    assert ("a", 1, "udp_datagram lost (loss, no hook)") in lines("udp", "a")
    assert ("a", 1, "udp_datagram lost (loss, no hook)") not in lines("buffers", "a")


def test_records_a_killed_collector_held_are_named_on_every_page(client: Client) -> None:
    """The next collector on the spool reports them (collector/sinks/held.py): of any kind."""
    store_batch([loss("a", 6, "loss", "sink/killed", "killed", 120)])
    what = "records of any kind lost: a collector was killed (SIGKILL) holding them in memory"
    for page in page_losses.PAGE_KINDS:
        assert lines(page, "a")[0] == ("a", 120, what)


def test_the_page_apis_carry_them(client: Client) -> None:
    udp = client.get("/api/dash/udp", {"host": "a"}).json()["losses"]
    assert [(r["host_id"], r["lost"]) for r in udp] == [("a", 12), ("a", 4)]
    assert [r["lost"] for r in client.get("/api/dash/buffers", {"host": "b"}).json()["losses"]] == [9, 2]
    assert [r["lost"] for r in client.get("/api/dash/ip-flows", {"host": "a"}).json()["losses"]] == [6, 4]
    assert len(client.get("/api/dash/connections").json()["losses"]) == 4


def test_what_retention_removed_is_named_on_the_pages_that_read_it(client: Client) -> None:
    """The store dropping records by policy (webapp/traces/retention.py) is said too: per
    table, how many and up to when, on every page that reads that table, and the loss
    reports' own table everywhere (removed, they no longer count above)."""
    t = 1_700_000_100.0
    Trimmed.objects.create(table=KIND_MODELS["siftr_sample"]._meta.db_table, rows=5_000, newest=t, updated=t)
    Trimmed.objects.create(table=KIND_MODELS["loss_report"]._meta.db_table, rows=7, newest=t - 50, updated=t)
    Trimmed.objects.create(table=KIND_MODELS["udp_datagram"]._meta.db_table, rows=0, newest=None, updated=t)
    siftr = ("every host", 5_000, "siftr_sample records removed by retention, up to 2023-11-14 22:15:00 UTC "
             "(NETTRAIL_RETENTION_DAYS, NETTRAIL_RETENTION_ROWS)")  # fmt: skip
    reports = ("every host", 7, "loss_report records removed by retention, up to 2023-11-14 22:14:10 UTC "
               "(NETTRAIL_RETENTION_DAYS, NETTRAIL_RETENTION_ROWS)")  # fmt: skip
    assert siftr in lines("connections") and reports in lines("connections")
    assert siftr not in lines("udp") and reports in lines("udp")  # nothing of udp's was removed
    # a connection opened after the last removal lost none of its records to it
    assert [r for r in page_losses.for_page("connections", "a", (t + 1, t + 2)) if r["host_id"] == "every host"] == []
    opened_before = page_losses.for_page("connections", "a", (t - 10, t + 2))
    assert [r["lost"] for r in opened_before if r["host_id"] == "every host"] == [5_000]
