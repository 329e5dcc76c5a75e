"""Issue 34 item 7 in the dashboard's server side: the Buffers page leaves unix-socket drops
out unless asked (`unix=1`) and says how many it left out; an empty IP-flows table names
the host whose collector lacks the ip-flows provider and how to enable it; /favicon.ico
answers anonymous browsers with the static icon, never a login redirect."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from translators.records import CollectorStatus, DropCount, SkbDrop
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db
HOST, BOOT = "web1", "boot-1"
_seq = itertools.count(1)


@pytest.fixture()
def client() -> Client:
    user = get_user_model().objects.create_user("viewer", password="pw-for-tests-only")
    c = Client()
    c.force_login(user)
    return c


def env(t: float, **kw: Any) -> dict[str, Any]:
    return {"host_id": HOST, "boot_id": BOOT, "seq": next(_seq), "ts_ns": int(t * 1e9), "ts_wall": t, **kw}


def drop(t: float, comm: str, location: str, reason: str = "SOCKET_CLOSE") -> SkbDrop:
    return SkbDrop(
        **env(t, comm=comm, tgid=len(comm)), provider="skb", probe="m-free", drop_reason=2,
        drop_reason_str=reason, drop_location=location,
    )  # fmt: skip


def status(t: float, providers: list[str]) -> CollectorStatus:
    return CollectorStatus(**env(t), provider="nettrail", probe="status", providers=providers, attached={})


@pytest.fixture()
def drops() -> None:
    t = time.time() - 5
    browser = [drop(t + i * 0.01, "chromium", "unix_release_sock+0x1c4") for i in range(5)]
    store_batch(
        [
            *browser,
            drop(t + 1, "curl", "tcp_v4_rcv+0x8a", reason="NO_SOCKET"),
            DropCount(
                **env(t + 2),
                provider="skb",
                probe="drop-count",
                drop_reason_str="SOCKET_CLOSE",
                drop_location="unix_release_sock+0x1c4",
                count=5,
                delta=5,
            ),  # fmt: skip
        ]
    )


def test_the_buffers_page_leaves_unix_socket_drops_out_and_counts_them(client: Client, drops: None) -> None:
    d = client.get(f"/api/dash/buffers?host={HOST}").json()
    assert d["unix"] == {"included": False, "drops": 5}
    assert [(r["comm"], r["n"]) for r in d["by_process"]] == [("curl", 1)]
    assert [(r["drop_location"], r["n"]) for r in d["by_location"]] == [("tcp_v4_rcv+0x8a", 1)]
    assert [r["comm"] for r in d["recent"]] == ["curl"]
    assert d["exact"] == []
    assert d["reasons"] == ["NO_SOCKET"]


def test_the_buffers_page_includes_unix_socket_drops_when_asked(client: Client, drops: None) -> None:
    d = client.get(f"/api/dash/buffers?host={HOST}&unix=1").json()
    assert d["unix"] == {"included": True, "drops": 5}
    assert [(r["comm"], r["n"]) for r in d["by_process"]] == [("chromium", 5), ("curl", 1)]
    assert [(r["drop_location"], r["total"]) for r in d["exact"]] == [("unix_release_sock+0x1c4", 5)]
    assert d["reasons"] == ["NO_SOCKET", "SOCKET_CLOSE"]


def test_an_empty_ip_flows_table_names_the_missing_provider_and_how_to_enable_it(client: Client) -> None:
    store_batch([status(time.time() - 5, ["tcp", "siftr"])])
    d = client.get("/api/dash/ip-flows").json()
    assert d["flows"] == []
    assert d["empty_why"] == [
        {
            "host_id": HOST,
            "why": "No IP flow counters: the collector on web1 runs tcp, siftr, not ip-flows. "
            "Enable it: nettrail collect --providers tcp,siftr,ip-flows "
            "(nettrail up: NETTRAIL_PROVIDERS=tcp,siftr,ip-flows), or on the dashboard: "
            "Status, What it traces (staff; followed by a collector run with --providers-from-server, "
            "as nettrail up's is).",
        }
    ]


def test_an_empty_ip_flows_table_says_when_the_provider_runs_but_counted_nothing(client: Client) -> None:
    store_batch([status(time.time() - 5, ["tcp", "ip-flows"])])
    d = client.get(f"/api/dash/ip-flows?host={HOST}").json()
    assert d["empty_why"] == [
        {
            "host_id": HOST,
            "why": "No IP flow counters recorded for this host (the collector on web1 runs tcp, ip-flows).",
        }
    ]


def test_favicon_ico_redirects_anonymous_browsers_to_the_static_icon() -> None:
    anonymous = Client()
    resp = anonymous.get("/favicon.ico")
    assert (resp.status_code, resp["Location"]) == (301, "/static/dashboard/favicon.svg")
    icon = anonymous.get("/static/dashboard/favicon.svg")
    assert (icon.status_code, icon["Content-Type"]) == (200, "image/svg+xml")
    assert b"<svg" in b"".join(icon.streaming_content)


def test_every_dashboard_page_links_the_icon(client: Client) -> None:
    for path in ("/", "/connections/", "/buffers/", "/counters/", "/alerts/"):
        body = client.get(path).content.decode()
        assert '<link rel="icon" type="image/svg+xml" href="/static/dashboard/favicon.svg">' in body, path
