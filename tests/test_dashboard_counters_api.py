"""The counters page's JSON views (/api/dash/ip-flows, /api/dash/stack-counters) and the
page itself: login, per-flow totals summed over an evicted and recreated entry, sorting
by bytes and packets, the host filter, stack counter deltas over time, per network
namespace (named, or by the process read in it) and summed over a host's namespaces."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.counters_cast import BLUE, FLOWS, NETNS, STACK, SUMMED, records
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


def test_stack_counters_show_each_namespaces_latest_value_and_increase_with_its_name_or_process(client: Client) -> None:
    body = client.get("/api/dash/stack-counters").json()
    latest = {
        (c["host_id"], c["netns"], c["mib"], c["counter"]): (c["value"], c["increase"], c["reports"])
        for c in body["latest"]
    }
    assert latest == STACK
    # last moved first; one read's records (same time) by host, namespace, MIB, counter
    assert [(c["host_id"], c["counter"]) for c in body["latest"]] == [
        ("web1", "ListenOverflows"), ("db1", "TCPTimeouts"), ("web1", "ListenDrops"), ("web1", "ListenOverflows"),
        ("web1", "OutRsts"),
    ]  # fmt: skip
    named = {(c["netns"], c["netns_name"], c["pid"], c["comm"]) for c in body["latest"]}
    assert named == {(NETNS, None, 1, "systemd"), (BLUE, "blue", 700, "sleep")}


def test_stack_counters_are_summed_over_every_namespace_of_a_host(client: Client) -> None:
    body = client.get("/api/dash/stack-counters").json()
    summed = {
        (c["host_id"], c["mib"], c["counter"]): (c["increase"], c["namespaces"], c["reports"]) for c in body["summed"]
    }
    assert summed == SUMMED  # web1's ListenOverflows: 12 in its init namespace + 9 in blue
    assert [c["counter"] for c in body["summed"]] == ["ListenOverflows", "TCPTimeouts", "ListenDrops", "OutRsts"]
    assert body["summed"][0]["last"] == 1_700_000_030.0


def test_each_namespace_is_listed_once_with_its_name_or_the_process_read_in_it(client: Client) -> None:
    rows = client.get("/api/dash/stack-counters", {"host": "web1"}).json()["namespaces"]
    assert [(n["netns"], n["netns_name"], n["pid"], n["comm"], n["reports"], n["last"]) for n in rows] == [
        (NETNS, None, 1, "systemd", 3, 1_700_000_030.0),
        (BLUE, "blue", 700, "sleep", 2, 1_700_000_020.0),
    ]


def test_the_netns_filter_keeps_one_namespaces_counters_and_refuses_a_non_number(client: Client) -> None:
    body = client.get("/api/dash/stack-counters", {"host": "web1", "netns": str(BLUE)}).json()
    assert [(c["netns"], c["counter"], c["value"]) for c in body["latest"]] == [
        (BLUE, "ListenDrops", 9), (BLUE, "ListenOverflows", 9),
    ]  # fmt: skip
    assert {s["counter"]: sum(s["counts"]) for s in body["timeline"]["series"]} == {
        "TcpExt ListenOverflows": 9, "TcpExt ListenDrops": 9,
    }  # fmt: skip
    resp = client.get("/api/dash/stack-counters", {"netns": "blue"})
    assert (resp.status_code, resp.json()) == (
        400, {"error": "netns must be a network namespace inode (a number); got 'blue'"},
    )  # fmt: skip


def test_stack_counter_deltas_of_every_namespace_land_summed_in_their_time_buckets(client: Client) -> None:
    tl = client.get("/api/dash/stack-counters", {"host": "web1"}).json()["timeline"]
    # reports at +0, +10, +20, +30 s: the chart spans its minimum minute, ending at the last report
    assert (len(tl["t"]), tl["bucket_s"], tl["t"][0]) == (60, 1.0, 1_700_000_030.0 - 60)
    series = {s["counter"]: s["counts"] for s in tl["series"]}
    assert list(series) == ["TcpExt ListenOverflows", "TcpExt ListenDrops", "Tcp OutRsts"]  # largest increase first
    moved = {name: {i: n for i, n in enumerate(counts) if n} for name, counts in series.items()}
    assert moved == {
        "TcpExt ListenOverflows": {30: 5, 50: 9, 59: 7},  # the init namespace's 5 and 7, blue's 9
        "TcpExt ListenDrops": {50: 9},
        "Tcp OutRsts": {40: 3},
    }


def test_stack_counters_of_another_host_are_filtered_out(client: Client) -> None:
    body = client.get("/api/dash/stack-counters", {"host": "db1"}).json()
    assert [(c["counter"], c["value"]) for c in body["latest"]] == [("TCPTimeouts", 4)]
    assert [s["counter"] for s in body["timeline"]["series"]] == ["TcpExt TCPTimeouts"]
    assert [(c["counter"], c["increase"]) for c in body["summed"]] == [("TCPTimeouts", 4)]
