"""The counters page's JSON views (/api/dash/ip-flows, /api/dash/stack-counters) and the
page itself: login, per-flow totals summed over an evicted and recreated entry, sorting
by bytes and packets, the host filter, stack counter deltas over time and latest values."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.counters_cast import FLOWS, NETNS, STACK, records
from webapp.traces.store import store_batch

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture()
def client() -> Client:
    store_batch(records())
    user = get_user_model().objects.create_user("viewer", password="pw-for-tests-only")
    c = Client()
    c.force_login(user)
    return c


def flows(client: Client, **params: Any) -> list[tuple[Any, ...]]:
    resp = client.get("/api/dash/ip-flows", params)
    assert resp.status_code == 200, resp.content
    return [
        (f["host_id"], f["direction"], f["protocol_name"], (f["src"], f["sport"]), (f["dst"], f["dport"]),
         f["packets"], f["bytes"])
        for f in resp.json()["flows"]
    ]  # fmt: skip


@pytest.mark.parametrize("url", ["/api/dash/ip-flows", "/api/dash/stack-counters"])
def test_it_answers_anonymous_callers_with_a_json_401(url: str) -> None:
    resp = Client().get(url)
    assert (resp.status_code, resp.json()) == (401, {"error": "login required"})


def test_the_page_needs_a_login_and_links_from_the_navigation(client: Client) -> None:
    anonymous = Client().get("/counters/")
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/accounts/login/")
    page = client.get("/counters/")
    assert page.status_code == 200
    assert b'<a href="/counters/" aria-current="page">Counters</a>' in page.content


def test_flows_are_sorted_by_bytes_by_default_with_totals_summed_over_their_reports(client: Client) -> None:
    assert flows(client) == [FLOWS["a"], FLOWS["b"], FLOWS["c"]]  # a: 25 + 3 packets over its two lives
    body = client.get("/api/dash/ip-flows").json()
    assert (body["total"], body["sort"], body["hosts"]) == (3, "-bytes", [])
    row = body["flows"][0]
    assert (row["reports"], row["if_index"], row["netns"], row["first"], row["last"]) == (
        3, 2, NETNS, 1_700_000_000.0, 1_700_000_010.0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("sort", "order"),
    [("-packets", "bac"), ("packets", "cab"), ("bytes", "cba"), ("-last", "cba"), ("first", "abc")],
)
def test_flows_sort_by_the_chosen_column(client: Client, sort: str, order: str) -> None:
    assert flows(client, sort=sort) == [FLOWS[name] for name in order]


def test_the_host_filter_keeps_only_that_hosts_flows(client: Client) -> None:
    assert flows(client, host="web1", sort="-packets") == [FLOWS["b"], FLOWS["a"]]
    assert flows(client, host="nowhere") == []


def test_an_unknown_sort_is_a_400_naming_the_allowed_keys(client: Client) -> None:
    resp = client.get("/api/dash/ip-flows", {"sort": "comm"})
    assert resp.status_code == 400
    assert resp.json() == {
        "error": "sort must be one of bytes, -bytes, packets, -packets, last, -last, first, -first; got 'comm'"
    }


def test_stack_counters_show_each_counters_latest_value_and_increase(client: Client) -> None:
    body = client.get("/api/dash/stack-counters").json()
    latest = {(c["host_id"], c["mib"], c["counter"]): (c["value"], c["increase"], c["reports"]) for c in body["latest"]}
    assert latest == STACK
    assert [c["counter"] for c in body["latest"]] == ["ListenOverflows", "TCPTimeouts", "OutRsts"]  # last moved first
    assert {c["netns"] for c in body["latest"]} == {NETNS}


def test_stack_counter_deltas_land_in_their_time_buckets(client: Client) -> None:
    tl = client.get("/api/dash/stack-counters", {"host": "web1"}).json()["timeline"]
    # reports at +0, +10, +30 s: the chart spans its minimum minute, ending at the last report
    assert (len(tl["t"]), tl["bucket_s"], tl["t"][0]) == (60, 1.0, 1_700_000_030.0 - 60)
    series = {s["counter"]: s["counts"] for s in tl["series"]}
    assert list(series) == ["TcpExt ListenOverflows", "Tcp OutRsts"]  # largest increase first
    moved = {name: {i: n for i, n in enumerate(counts) if n} for name, counts in series.items()}
    assert moved == {"TcpExt ListenOverflows": {30: 5, 59: 7}, "Tcp OutRsts": {40: 3}}


def test_stack_counters_of_another_host_are_filtered_out(client: Client) -> None:
    body = client.get("/api/dash/stack-counters", {"host": "db1"}).json()
    assert [(c["counter"], c["value"]) for c in body["latest"]] == [("TCPTimeouts", 4)]
    assert [s["counter"] for s in body["timeline"]["series"]] == ["TcpExt TCPTimeouts"]
