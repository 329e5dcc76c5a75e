"""The dashboard's JSON views (/api/dash/): login, the filter language on real rows, keyset
pages that neither skip nor repeat, alert acknowledgement. The export downloads are the
report documents: tests/test_dashboard_export.py."""

from __future__ import annotations

import itertools
import time
from typing import Any

import msgspec
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from translators.records import Alert, Connection, Record, TcpReset, TcpRetransmit, TcpStateChange, connection_uuid
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db
HOST, OTHER, BOOT = "web1", "db1", "boot-1"
_seq = itertools.count(1)


def conn_records(
    host: str, cookie: int, sport: int, dport: int, comm: str, *, retrans: int = 0, rule: str | None = None,
    bytes_out: int | None = None, closed: bool = False, reset: bool = False, t: float = 1_700_000_000.0,
) -> list[Record]:  # fmt: skip
    """One connection's records, as a collector would send them."""
    uuid = connection_uuid(host, BOOT, cookie)
    base: dict[str, Any] = {
        "host_id": host, "boot_id": BOOT, "provider": "tcp", "conn_uuid": uuid, "src": "10.0.0.1",
        "sport": sport, "dst": "10.0.0.2", "dport": dport, "comm": comm, "pid": cookie, "tgid": cookie,
        "uid": 1000, "ctx": "task",
    }  # fmt: skip

    def env(dt: float) -> dict[str, Any]:
        return {**base, "seq": next(_seq), "ts_ns": int((t + dt) * 1e9), "ts_wall": t + dt}

    out: list[Record] = [
        TcpStateChange(**env(0), probe="state-change", prev_state="CLOSED", state="SYN_SENT"),
        TcpStateChange(**env(0.001), probe="state-change", prev_state="SYN_SENT", state="ESTABLISHED"),
    ]
    out += [TcpRetransmit(**env(0.5 + i), probe="retransmit", tcp_seq=i) for i in range(retrans)]
    if reset:
        out.append(
            TcpReset(**env(2), probe="reset-received", state="ESTABLISHED", sender="peer", reason="NOT_SPECIFIED")
        )
    if rule:
        out.append(
            Alert(
                **{**env(1), "provider": "nettrail"},
                probe="alert",
                rule_id=rule,
                severity="warning",
                start=t + 1,
                message=f"{rule} fired",
            )
        )
    if bytes_out is not None or closed:
        summary = {k: v for k, v in env(3).items() if k not in ("ctx",)}
        out.append(
            Connection(
                **{**summary, "provider": "nettrail"},
                probe="conn-summary",
                proto="tcp",
                source="kernel" if closed else "wire",
                bytes_orig=bytes_out,
                state="CLOSED" if closed else "ESTABLISHED",
                start=t,
                end=t + 3,
            )
        )
    return out


@pytest.fixture()
def client() -> Client:
    user = get_user_model().objects.create_user("viewer", password="pw-for-tests-only")
    c = Client()
    c.force_login(user)
    return c


@pytest.fixture()
def cast() -> dict[str, str]:
    """web1: nginx :443 with retransmits and a K1 alert (closed, 5 MB); nginx :443 clean;
    sshd :22 with a retransmit and a reset from the peer. db1: postgres :5432."""
    specs = {
        "nginx_retrans": (HOST, 1, 443, 50001, "nginx", {"retrans": 2, "rule": "K1", "bytes_out": 5_000_000, "closed": True}),
        "nginx_clean": (HOST, 2, 443, 50002, "nginx", {}),
        "sshd": (HOST, 3, 22, 50003, "sshd", {"retrans": 1, "reset": True}),
        "postgres": (OTHER, 4, 5432, 50004, "postgres", {"bytes_out": 1000}),
    }  # fmt: skip
    out = {}
    for name, (host, cookie, sport, dport, comm, kw) in specs.items():
        store_batch(conn_records(host, cookie, sport, dport, comm, **kw))
        out[name] = connection_uuid(host, BOOT, cookie)
    return out


def rows(client: Client, **params: Any) -> list[str]:
    resp = client.get("/api/dash/connections", params)
    assert resp.status_code == 200, resp.content
    return [r["conn_uuid"] for r in resp.json()["rows"]]


def test_it_answers_anonymous_callers_with_a_json_401() -> None:
    resp = Client().get("/api/dash/connections")
    assert resp.status_code == 401
    assert resp.json() == {"error": "login required"}


def test_the_documented_example_finds_exactly_the_nginx_connection_that_retransmitted(
    client: Client, cast: dict[str, str]
) -> None:
    assert rows(client, q="port 443 and comm nginx and retrans > 0") == [cast["nginx_retrans"]]


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        ("host db1", ["postgres"]),
        ("comm ~ ngi", ["nginx_clean", "nginx_retrans"]),
        ("anomaly", ["nginx_retrans", "sshd"]),
        ("anomaly K1", ["nginx_retrans"]),
        ("anomaly K9", []),
        ("bytes >= 5M", ["nginx_retrans"]),
        ("state open", ["nginx_clean", "postgres", "sshd"]),
        ("state CLOSED or port 22", ["nginx_retrans", "sshd"]),
        ("not host web1", ["postgres"]),
        ("port != 443 and host web1", ["sshd"]),
    ],
)
def test_filters_select_the_expected_connections(
    client: Client, cast: dict[str, str], q: str, expected: list[str]
) -> None:
    assert sorted(rows(client, q=q)) == sorted(cast[name] for name in expected)


def test_a_bad_expression_is_a_400_naming_the_problem(client: Client, cast: dict[str, str]) -> None:
    resp = client.get("/api/dash/connections", {"q": "retrans > lots"})
    assert resp.status_code == 400
    assert resp.json() == {"error": "retrans needs a whole number, got 'lots' (at character 11)", "pos": 10}


def test_a_forged_cursor_or_unknown_sort_is_a_400(client: Client, cast: dict[str, str]) -> None:
    assert client.get("/api/dash/connections", {"cursor": "!!!"}).status_code == 400
    resp = client.get("/api/dash/connections", {"sort": "-colour"})
    assert resp.status_code == 400
    assert resp.json()["error"].startswith("unknown sort '-colour'")


@pytest.mark.parametrize(
    "sort", ["-start", "bytes", "-comm", "local", "-retrans", "pid", "-uid", "state", "duration", "host"]
)
def test_pages_cover_every_connection_once_in_sort_order(client: Client, sort: str) -> None:
    batch: list[Record] = []
    for i in range(130):
        batch += conn_records(
            HOST,
            1000 + i,
            1000 + i % 7,
            40000 + i,
            f"app{i % 5}",
            retrans=i % 3,
            bytes_out=(i * 37) % 11 or None,
            t=1_700_000_000.0 + i % 13,
        )
    store_batch(batch)
    seen: list[dict[str, Any]] = []
    cursor = None
    for _ in range(10):
        params = {"sort": sort, "limit": 25, **({"cursor": cursor} if cursor else {})}
        body = client.get("/api/dash/connections", params).json()
        assert body["total"] == 130
        seen += body["rows"]
        cursor = body["next"]
        if cursor is None:
            break
    assert len(seen) == 130 and len({r["conn_uuid"] for r in seen}) == 130
    key = {
        "start": "start",
        "bytes": "bytes",
        "comm": "comm",
        "local": "sport",
        "retrans": "retrans",
        "pid": "pid",
        "uid": "uid",
        "state": "state",
        "duration": "duration",
        "host": "host_id",
    }[sort.lstrip("-")]
    values = [r[key] for r in seen]
    assert values == sorted(values, reverse=sort.startswith("-"))


def test_live_lookups_return_only_new_connections_that_match_the_filter(client: Client, cast: dict[str, str]) -> None:
    found = rows(client, q="comm nginx", uuids=f"{cast['nginx_clean']},{cast['sshd']}")
    assert found == [cast["nginx_clean"]]


def test_the_detail_view_orders_the_states_and_names_who_caused_them(client: Client, cast: dict[str, str]) -> None:
    body = client.get(f"/api/dash/connections/{cast['nginx_retrans']}").json()
    states = [(i["state"], i["who"]) for i in body["timeline"] if i["type"] == "state"]
    assert states == [("SYN_SENT", "nginx (pid 1)"), ("ESTABLISHED", "nginx (pid 1)")]
    runs = [i for i in body["timeline"] if i["type"] == "retransmits"]
    assert [(r["count"], r["ts"], r["last"]) for r in runs] == [(2, 1_700_000_000.5, 1_700_000_001.5)]
    assert body["marks"] == {"retransmit": [1_700_000_000.5, 1_700_000_001.5], "reset": []}
    assert [a["rule_id"] for a in body["alerts"]] == ["K1"]
    assert client.get("/api/dash/connections/no-such-uuid").status_code == 404


def test_the_timeline_marks_a_reset_between_the_states(client: Client, cast: dict[str, str]) -> None:
    body = client.get(f"/api/dash/connections/{cast['sshd']}").json()
    kinds = [i["type"] for i in body["timeline"]]
    assert kinds == ["state", "state", "retransmits", "reset"]
    assert body["timeline"][3]["text"] == "RST received from the peer in ESTABLISHED (NOT_SPECIFIED)"


def test_acknowledging_an_alert_records_who_and_is_idempotent(client: Client, cast: dict[str, str]) -> None:
    alert = client.get("/api/dash/alerts", {"rule": "K1"}).json()["alerts"][0]
    assert alert["acked_by"] is None
    first = client.post(f"/api/dash/alerts/{alert['id']}/ack")
    again = client.post(f"/api/dash/alerts/{alert['id']}/ack")
    assert first.status_code == again.status_code == 200
    assert first.json()["acked_by"] == "viewer" and again.json()["acked_at"] == first.json()["acked_at"]
    assert [a["id"] for a in client.get("/api/dash/alerts", {"acked": "no"}).json()["alerts"]] == []
    assert client.get(f"/api/dash/alerts/{alert['id']}/ack").status_code == 405
    assert client.post("/api/dash/alerts/999999/ack").status_code == 404


@pytest.mark.parametrize(
    ("q", "expect"),
    [
        ("dst 10.0.0.0/24", ["nginx_clean", "nginx_retrans", "postgres", "sshd"]),
        ("dst 10.0.1.0/24", []),
        ("addr 10.0.0.2/32 and port 22", ["sshd"]),
        ("dst != 10.0.0.0/8", []),
        ("dst ::/0", []),
        ("resets > 0", ["sshd"]),
    ],
)
def test_prefixes_and_resets_select_the_expected_connections(
    client: Client, cast: dict[str, str], q: str, expect: list[str]
) -> None:
    assert sorted(rows(client, q=q)) == sorted(cast[name] for name in expect)


def test_an_ipv6_prefix_matches_any_written_form_of_the_address(client: Client) -> None:
    records = conn_records(HOST, 9, 443, 50009, "curl")
    for rec in records:
        rec.dst = "2001:db8:0:1::5"  # compressed as Python writes it; the prefix is not a text prefix
    store_batch(records)
    uuid = connection_uuid(HOST, BOOT, 9)
    assert rows(client, q="dst 2001:db8::/32") == [uuid]
    assert rows(client, q="dst 2001:db8:0:1::/64") == [uuid]
    assert rows(client, q="dst 2001:db8:0:2::/64") == []


def test_an_unknown_rule_is_a_400_and_a_near_miss_gets_a_hint(client: Client, cast: dict[str, str]) -> None:
    resp = client.get("/api/dash/connections", {"q": "anomaly K99"})
    assert resp.status_code == 400
    assert resp.json()["error"].startswith("no such rule 'K99'; did you mean 'K9'? rules: H1, H2, H3, H4, K1, K2,")
    body = client.get("/api/dash/connections", {"q": "comm ngin"}).json()
    assert body["total"] == 0
    assert body["hints"] == ["no connection has comm exactly 'ngin'; comm ~ ngin (contains) matches 2"]
    assert client.get("/api/dash/connections", {"q": "comm nginx"}).json()["hints"] == []
    assert client.get("/api/dash/connections", {"q": "comm zzz"}).json()["hints"] == []


def test_an_alert_row_carries_its_first_and_worst_versions(client: Client) -> None:
    t = 1_700_000_100.0
    versions = [(0.020, 39, "open"), (0.061, 120, "open"), (0.047, 249, "closed")]
    for i, (metric, count, status) in enumerate(versions):
        store_batch(
            [
                Alert(
                    host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=int((t + i) * 1e9), ts_wall=t + i,
                    provider="nettrail", probe="alert", rule_id="K1", severity="warning", start=t,
                    alert_id="k1-versions", metric=metric, count=count, status=status,
                    message=f"{count} retransmitted ({metric:.1%})",
                )
            ]
        )  # fmt: skip
        row = client.get("/api/dash/alerts", {"rule": "K1"}).json()["alerts"][0]
        assert (row["metric"], row["count"], row["status"], row["versions"]) == (metric, count, status, i + 1)
    assert row["first"] == {"metric": 0.020, "count": 39, "message": "39 retransmitted (2.0%)", "ts": t}
    assert row["worst"] == {"metric": 0.061, "count": 120, "message": "120 retransmitted (6.1%)", "ts": t + 1}


def test_an_open_alert_its_collector_restarted_after_says_nothing_follows_it(client: Client) -> None:
    """A restart's rule engine does not know the alerts of the one before: an alert left
    open by it is marked from the host's fresh start (a collector_status without
    untraced_ns); a swap of programs (untraced_ns set) keeps the engine, and marks nothing."""
    from translators.records import CollectorStatus

    t = 1_700_000_200.0

    def alert(alert_id: str, at: float, status: str = "open") -> Alert:
        return Alert(
            host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=int(at * 1e9), ts_wall=at, provider="nettrail",
            probe="alert", rule_id="K1", severity="warning", start=t, alert_id=alert_id, metric=0.05, count=10,
            status=status, message="retransmitted",
        )  # fmt: skip

    def started(at: float, untraced_ns: int | None) -> CollectorStatus:
        return CollectorStatus(
            host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=int(at * 1e9), ts_wall=at, provider="nettrail",
            probe="status", providers=["tcp"], attached={}, untraced_ns=untraced_ns,
        )  # fmt: skip

    store_batch([alert("left", t), alert("closed", t, "closed"), started(t + 5, 6_000_000), alert("swapped", t + 1)])

    assert set(client_marks(client).values()) == {None}  # a swap: the engine goes on
    store_batch([started(t + 10, None), alert("after", t + 11)])  # a fresh start, then a new alert
    got = client_marks(client)
    assert (got["left"], got["closed"], got["swapped"], got["after"]) == (t + 10, None, t + 10, None)
    assert client_marks(client, "unfollowed_because")["left"] == "restarted"

    # a collector that stops for good (its last collector_stats says so) follows nothing
    # either; the first stop or fresh start after an alert's newest version is named
    store_batch([stats(t + 20, stopped=None), alert("running", t + 21), stats(t + 22, stopped=None)])
    assert client_marks(client)["running"] is None  # a periodic record: the engine runs on
    store_batch([stats(t + 30, stopped=True), started(t + 40, None)])
    got, why = client_marks(client), client_marks(client, "unfollowed_because")
    assert (got["running"], why["running"]) == (t + 30, "stopped")
    assert (got["after"], why["after"]) == (t + 30, "stopped")
    assert (got["left"], why["left"]) == (t + 10, "restarted")  # the earliest after it


def stats(at: float, stopped: bool | None) -> Any:
    from translators.records import CollectorStats

    return CollectorStats(
        host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=int(at * 1e9), ts_wall=at, provider="nettrail",
        probe="stats", interval_s=10.0, cpu_time_s=0.1, cpu_total_s=1.0, cpu_percent=1.0, events=5,
        events_per_s=0.5, records=5, stopped=stopped,
    )  # fmt: skip


def client_marks(client: Client, field: str = "unfollowed_since") -> dict[str, Any]:
    rows = client.get("/api/dash/alerts", {"rule": "K1"}).json()["alerts"]
    from webapp.dashboard.tables import Alert as AlertRow

    ids = dict(AlertRow.objects.values_list("id", "alert_id"))
    return {ids[r["id"]]: r[field] for r in rows}


def test_the_udp_view_names_the_hosts_whose_collector_runs_no_udp_provider(client: Client) -> None:
    from translators.records import CollectorStatus

    def status(host: str, providers: list[str], t: float) -> CollectorStatus:
        return CollectorStatus(
            host_id=host, boot_id=BOOT, seq=next(_seq), ts_ns=1, ts_wall=t, provider="nettrail", probe="status",
            providers=providers, attached={},
        )  # fmt: skip

    store_batch([status(HOST, ["tcp", "udp"], 10.0), status(HOST, ["tcp", "siftr"], 20.0), status(OTHER, ["udp"], 5.0)])
    assert client.get("/api/dash/udp").json()["provider_off"] == [{"host_id": HOST, "providers": ["tcp", "siftr"]}]
    assert client.get("/api/dash/udp", {"host": OTHER}).json()["provider_off"] == []


def test_the_udp_view_says_what_a_hosts_udp_provider_cannot_give_there(client: Client) -> None:
    """collector_status `degraded` of udp / udp-calls (a host without a cgroup v2 hierarchy:
    no destinations for unconnected sockets' calls); another provider's is not the page's."""
    from translators.records import CollectorStatus

    why = "no cgroup v2 hierarchy is mounted"
    store_batch([
        CollectorStatus(
            host_id=HOST, boot_id=BOOT, seq=next(_seq), ts_ns=1, ts_wall=30.0, provider="nettrail", probe="status",
            providers=["tcp", "udp-calls"], attached={},
            degraded={"udp-calls": {"dst/dport of unconnected sockets' calls": why}, "tcp": {"tcp_reset.reason": "x"}},
        ),
        CollectorStatus(
            host_id=OTHER, boot_id=BOOT, seq=next(_seq), ts_ns=1, ts_wall=30.0, provider="nettrail", probe="status",
            providers=["tcp"], attached={}, degraded={"udp-calls": {"stale": "not running it"}},
        ),
    ])  # fmt: skip
    assert client.get("/api/dash/udp").json()["degraded"] == [
        {"host_id": HOST, "provider": "udp-calls", "what": "dst/dport of unconnected sockets' calls", "why": why}
    ]
    assert client.get("/api/dash/udp", {"host": OTHER}).json()["degraded"] == []


def test_nettrails_own_connections_are_hidden_unless_asked_for(
    client: Client, cast: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    from translators.records import CollectorStatus

    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    monkeypatch.setenv("NETTRAIL_WEBAPP_LISTEN", "10.0.0.2:8000")
    store_batch(
        [
            CollectorStatus(
                host_id=HOST, boot_id=boot, seq=next(_seq), ts_ns=1, ts_wall=1.0, provider="nettrail",
                probe="status", providers=["tcp"], attached={}, pid=777, comm="nettrail",
            )
        ]
    )  # fmt: skip
    store_batch(conn_records(HOST, 70, 41000, 8000, "chrome"))  # the browser, to the webapp's socket
    store_batch(conn_records(HOST, 777, 41001, 8443, "nettrail"))  # the collector's ingest (pid 777)
    store_batch(conn_records(OTHER, 71, 41002, 8000, "chrome"))  # port 8000 on another machine: not ours
    browser, ingest, remote = (connection_uuid(h, BOOT, c) for h, c in ((HOST, 70), (HOST, 777), (OTHER, 71)))
    shown = rows(client, limit=200)
    assert remote in shown and browser not in shown and ingest not in shown
    assert set(cast.values()) <= set(shown)
    everything = rows(client, limit=200, own="1")
    assert {browser, ingest, remote} | set(cast.values()) == set(everything)


def test_state_time_wait_finds_sockets_the_kernel_still_holds_in_time_wait(client: Client) -> None:
    """The tracer records TIME_WAIT then an inferred CLOSED at once; ss shows TIME-WAIT for
    60 s, and so does the filter: recently entered yes, over a minute ago no."""
    now = time.time()
    for cookie, entered in ((80, now - 5), (81, now - 120)):
        records = conn_records(HOST, cookie, 42000 + cookie, 443, "curl", t=entered - 1)
        base = {k: v for k, v in msgspec.structs.asdict(records[0]).items() if k not in ("seq", "ts_ns", "ts_wall")}
        for i, (prev, new) in enumerate((("ESTABLISHED", "TIME_WAIT"), ("TIME_WAIT", "CLOSED"))):
            base.update(prev_state=prev, state=new, inferred=new == "CLOSED")
            records.append(
                TcpStateChange(
                    **{**base, "seq": next(_seq), "ts_ns": int((entered + i * 1e-6) * 1e9), "ts_wall": entered}
                )
            )
        store_batch(records)
    recent = connection_uuid(HOST, BOOT, 80)
    assert client.get("/api/dash/connections", {"q": "state CLOSED and port 42080"}).json()["total"] == 1
    assert rows(client, q="state TIME_WAIT") == [recent]
    assert recent not in rows(client, q="state != TIME_WAIT", limit=200)


def test_choosing_a_drop_reason_narrows_the_buffers_chart_and_breakdowns(client: Client) -> None:
    from translators.records import SkbDrop

    t = time.time() - 30
    drops = [
        SkbDrop(
            host_id=HOST,
            boot_id=BOOT,
            seq=next(_seq),
            ts_ns=int((t + i) * 1e9),
            ts_wall=t + i,
            provider="skb",
            probe="drop",
            skb_uid=500 + i,
            drop_reason=6 if reason == "NETFILTER_DROP" else 2,
            drop_reason_str=reason,
            drop_location=f"{reason.lower()}+0x1",
            len=100,
            comm="curl",
            pid=7,
            tgid=7,
        )  # fmt: skip
        for i, reason in enumerate(["NETFILTER_DROP", "NO_SOCKET", "NO_SOCKET", "NETFILTER_DROP", "NO_SOCKET"])
    ]
    store_batch(drops)
    every = client.get("/api/dash/buffers").json()
    chosen = client.get("/api/dash/buffers", {"reason": "NETFILTER_DROP"}).json()
    assert [(s["reason"], sum(s["counts"])) for s in every["timeline"]["series"]] == [
        ("NO_SOCKET", 3),
        ("NETFILTER_DROP", 2),
    ]
    assert [(s["reason"], sum(s["counts"])) for s in chosen["timeline"]["series"]] == [("NETFILTER_DROP", 2)]
    assert [(r["drop_location"], r["n"]) for r in chosen["by_location"]] == [("netfilter_drop+0x1", 2)]
    assert [(r["comm"], r["n"]) for r in chosen["by_process"]] == [("curl", 2)]
    assert chosen["reasons"] == ["NETFILTER_DROP", "NO_SOCKET"]
