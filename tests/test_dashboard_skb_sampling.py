"""Issue 18 items 1, 3 and 9 in the dashboard API: the Overview's retransmitted segments
per second (the kernel's unit), a connection's retransmitted segments and bytes apart
from its bytes sent, the Buffers page's newest sampled lifecycles with each host's
sampling beside them, and nettrail up's provider arguments."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from nettrail.commands.up import (
    COLLECTOR_PROVIDERS,
    COLLECTOR_SKB_SAMPLE,
    COLLECTOR_SKB_WINDOW,
    PER_PACKET_PROVIDERS,
    collector_providers,
)
from translators.records import (
    CollectorStatus,
    SamplingReport,
    SkbEvent,
    TcpRetransmit,
    TcpStateChange,
    connection_uuid,
)
from translators.skb import INFERRED_APPROX
from webapp.traces.models import Host
from webapp.traces.store import store_batch

pytestmark = pytest.mark.django_db
HOST, OTHER, BOOT = "web1", "db1", "boot-1"
_seq = itertools.count(1)


@pytest.fixture()
def client() -> Client:
    user = get_user_model().objects.create_user("viewer", password="pw-for-tests-only")
    c = Client()
    c.force_login(user)
    return c


def env(host: str, t: float, **kw: Any) -> dict[str, Any]:
    return {"host_id": host, "boot_id": BOOT, "seq": next(_seq), "ts_ns": int(t * 1e9), "ts_wall": t, **kw}


def test_retransmits_count_in_segments_and_failed_ones_do_not_count(client: Client) -> None:
    t = time.time() - 0.5  # inside the Overview's 10 s window
    uuid = connection_uuid(HOST, BOOT, 9)
    flow = {"provider": "tcp", "conn_uuid": uuid, "src": "10.0.0.1", "sport": 5000, "dst": "10.0.0.2", "dport": 80}
    store_batch(
        [
            TcpStateChange(**env(HOST, t, **flow), probe="state-change", prev_state="SYN_SENT", state="ESTABLISHED"),
            # a GSO skb of 3 segments, a record without segs (one), a failed retransmission
            TcpRetransmit(**env(HOST, t + 0.1, **flow), probe="retransmit", segs=3, tcp_payload_len=4344, err=0),
            TcpRetransmit(**env(HOST, t + 0.2, **flow), probe="retransmit", tcp_payload_len=1448),
            TcpRetransmit(**env(HOST, t + 0.3, **flow), probe="retransmit", segs=2, tcp_payload_len=2896, err=-16),
        ]
    )
    Host.objects.create(name=HOST)  # the Overview lists the hosts that may send records
    [row] = [h for h in client.get("/api/dash/overview").json()["hosts"] if h["host_id"] == HOST]
    assert row["retrans_segs_per_s"] == pytest.approx(4 / 10)
    conn = client.get(f"/api/dash/connections/{uuid}").json()["conn"]
    assert (conn["retrans_segs"], conn["retrans_bytes_out"]) == (4, 4344 + 1448)


def status(
    host: str,
    t: float,
    providers: list[str],
    skb_sample: int | None,
    skb_stages: str | None = None,
    skb_window: str | None = None,
) -> CollectorStatus:
    return CollectorStatus(
        **env(host, t), provider="nettrail", probe="status", providers=providers, attached={}, skb_sample=skb_sample,
        skb_stages=skb_stages, skb_window=skb_window,
    )  # fmt: skip


def test_the_buffers_page_lists_the_newest_followed_buffers_with_their_hosts_sampling(client: Client) -> None:
    t = time.time() - 5
    stages = [("tx-first", None), ("xmit", None), ("rx", None), ("copy", None), ("consume", "consumed")]
    lives = [
        SkbEvent(
            **env(HOST, t + uid + i * 0.001), provider="skb", probe=f"skb-{s}", skb_uid=uid, stage=s, end=e, len=100
        )
        for uid in (11, 12)
        for i, (s, e) in enumerate(stages)
    ]
    report = SamplingReport(
        **env(HOST, t + 3), provider="nettrail", probe="sampling", event_type="skb_event", setting="skb-sample 64",
        window_s=1.0, observed=6400, emitted=100, ratio=64.0,
    )  # fmt: skip
    store_batch(
        [
            status(HOST, t, ["tcp", "skb", "skb-lifecycle"], 64),
            status(OTHER, t, ["tcp", "skb"], None),
            report,
            *lives,
        ]
    )
    d = client.get("/api/dash/buffers").json()
    # nothing chosen: the newest buffers followed, oldest first, each complete
    assert [(b["skb_uid"], [s["stage"] for s in b["stages"]], b["end"]) for b in d["lifecycles"]] == [
        (11, [s for s, _ in stages], "consumed"),
        (12, [s for s, _ in stages], "consumed"),
    ]
    # the host running skb-lifecycle, with N and the last exact counts; the other is not listed
    assert [(s["host_id"], s["skb_sample"], s["last"]["observed"], s["last"]["emitted"]) for s in d["sampling"]] == [
        (HOST, 64, 6400, 100)
    ]
    one = client.get("/api/dash/skb/11", {"host": HOST}).json()
    assert [s["skb_sample"] for s in one["sampling"]] == [64]
    # a status without skb_stages is a collector from before --skb-stages: every stage recorded
    assert [(s["skb_stages"], s["stages_note"]) for s in d["sampling"]] == [("all", None)]


def test_lifecycles_recorded_with_the_ends_only_say_which_stages_are_not_recorded(client: Client) -> None:
    t = time.time() - 5
    uuid = connection_uuid(HOST, BOOT, 21)
    flow = {"provider": "skb", "conn_uuid": uuid, "src": "10.0.0.1", "sport": 5000, "dst": "10.0.0.2", "dport": 80}
    ends = [("tx-first", None), ("rx", None), ("copy", None), ("consume", "consumed")]
    store_batch(
        [
            status(HOST, t, ["tcp", "skb", "skb-lifecycle"], 256, "ends"),
            status(OTHER, t, ["tcp", "skb", "skb-lifecycle"], 1, "all"),
            TcpStateChange(
                **env(HOST, t + 0.1, **{**flow, "provider": "tcp"}), probe="state-change", prev_state="SYN_SENT",
                state="ESTABLISHED",
            ),
            *[
                SkbEvent(**env(HOST, t + 1 + i * 0.001, **flow), probe=f"skb-{s}", skb_uid=31, stage=s, end=e, len=100)
                for i, (s, e) in enumerate(ends)
            ],
        ]
    )  # fmt: skip
    d = client.get("/api/dash/buffers").json()
    by_host = {s["host_id"]: s for s in d["sampling"]}
    assert (by_host[HOST]["skb_sample"], by_host[HOST]["skb_stages"]) == (256, "ends")
    note = by_host[HOST]["stages_note"]
    assert "xmit-start, xmit" in note and "not recorded" in note and "--skb-stages all" in note
    assert "NETTRAIL_SKB_STAGES=all" in note
    assert (by_host[OTHER]["skb_stages"], by_host[OTHER]["stages_note"]) == ("all", None)
    # the recorded stages are shown as recorded: none is made up for the ones not seen
    [life] = [b for b in d["lifecycles"] if b["skb_uid"] == 31]
    assert [s["stage"] for s in life["stages"]] == [s for s, _ in ends]
    # the buffer's panel, the connection's page and the read API say the same
    one = client.get("/api/dash/skb/31", {"host": HOST}).json()
    assert [(s["skb_stages"], s["stages_note"]) for s in one["sampling"]] == [("ends", note)]
    conn = client.get(f"/api/dash/connections/{uuid}").json()
    assert [(s["skb_stages"], s["stages_note"]) for s in conn["skb_sampling"]] == [("ends", note)]
    api = client.get(f"/api/connections/{uuid}/lifecycle").json()
    assert api["skb_recording"] == {
        "skb_sample": 256, "skb_stages": "ends", "stages_note": note, "skb_window": None, "window_note": None,
    }  # fmt: skip
    assert [r["stage"] for r in api["records"] if r["kind"] == "skb_event"] == [s for s, _ in ends]


def test_lifecycles_followed_in_windows_say_so_with_the_windows_open_time(client: Client) -> None:
    t = time.time() - 5
    report = SamplingReport(
        **env(HOST, t + 3), provider="nettrail", probe="sampling", event_type="skb_event",
        setting="skb-sample 64, skb-window 0.2/2", window_s=4.0, observed=6400, emitted=100, ratio=64.0, open_s=0.41,
    )  # fmt: skip
    uuid = connection_uuid(HOST, BOOT, 41)
    flow = {"provider": "tcp", "conn_uuid": uuid, "src": "10.0.0.1", "sport": 5000, "dst": "10.0.0.2", "dport": 80}
    opened = TcpStateChange(
        **env(HOST, t + 0.1, **flow), probe="state-change", prev_state="SYN_SENT", state="ESTABLISHED"
    )
    store_batch([status(HOST, t, ["tcp", "skb", "skb-lifecycle"], 64, "ends", "0.2/2"), report, opened])
    [s] = client.get("/api/dash/buffers").json()["sampling"]
    assert (s["skb_sample"], s["skb_window"], s["last"]["observed"], s["last"]["open_s"]) == (64, "0.2/2", 6400, 0.41)
    assert "attached 0.2 s of every 2 s (10% of the time)" in s["window_note"]
    assert "NETTRAIL_SKB_WINDOW=0" in s["window_note"]
    api = client.get(f"/api/connections/{uuid}/lifecycle").json()
    assert api["skb_recording"]["skb_window"] == "0.2/2"
    assert api["skb_recording"]["window_note"] == s["window_note"]
    [status_row] = client.get("/api/dash/status", {"host": HOST}).json()["hosts"]
    assert status_row["status"]["skb_window"] == "0.2/2"  # the Status panel's sampling line


def test_nettrail_up_runs_sampled_lifecycles_by_default_and_the_variable_sets_n_or_turns_them_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    sampled = ["--providers", COLLECTOR_PROVIDERS + ",skb-lifecycle", "--skb-sample"]
    ends = ["--skb-stages", "ends", "--skb-window", COLLECTOR_SKB_WINDOW]
    every = ["--skb-stages", "all", "--skb-window", COLLECTOR_SKB_WINDOW]
    assert COLLECTOR_SKB_WINDOW == "0.2/2"
    # in windows unless told otherwise: 0 attaches the hooks all the time, a bad value is said
    assert collector_providers({"NETTRAIL_SKB_WINDOW": "0"}) == [*sampled, str(COLLECTOR_SKB_SAMPLE), *ends[:2]]
    assert collector_providers({"NETTRAIL_SKB_WINDOW": "1/10"}) == [
        *sampled,
        str(COLLECTOR_SKB_SAMPLE),
        *ends[:3],
        "1/10",
    ]
    assert capsys.readouterr().err == ""
    assert collector_providers({"NETTRAIL_SKB_WINDOW": "5/1"}) == [*sampled, str(COLLECTOR_SKB_SAMPLE), *ends]
    assert "$NETTRAIL_SKB_WINDOW must be 0 (no windows) or OPEN/EVERY" in capsys.readouterr().err
    assert COLLECTOR_PROVIDERS == "tcp,siftr-poll,skb,udp-calls"  # no program on a packet's path
    assert collector_providers({}) == [*sampled, str(COLLECTOR_SKB_SAMPLE), *ends]
    assert collector_providers({"NETTRAIL_SKB_SAMPLE": "256"}) == [*sampled, "256", *ends]
    assert collector_providers({"NETTRAIL_SKB_SAMPLE": "1"}) == [*sampled, "1", *every]  # every buffer, every stage
    assert collector_providers({"NETTRAIL_SKB_SAMPLE": "0"}) == ["--providers", COLLECTOR_PROVIDERS]
    assert collector_providers({"NETTRAIL_SKB_SAMPLE": "many"}) == [*sampled, str(COLLECTOR_SKB_SAMPLE), *ends]
    # the stage hooks, opt-in when sampled (and a sampled run's ends, if asked, with N = 1)
    assert collector_providers({"NETTRAIL_SKB_STAGES": "all"}) == [*sampled, str(COLLECTOR_SKB_SAMPLE), *every]
    assert collector_providers({"NETTRAIL_SKB_SAMPLE": "1", "NETTRAIL_SKB_STAGES": "ends"}) == [*sampled, "1", *ends]
    assert collector_providers({"NETTRAIL_SKB_STAGES": "some"}) == [*sampled, str(COLLECTOR_SKB_SAMPLE), *ends]
    assert collector_providers({"NETTRAIL_SKB_SAMPLE": "0", "NETTRAIL_SKB_STAGES": "all"}) == [
        "--providers",
        COLLECTOR_PROVIDERS,
    ]


def test_nettrail_providers_chooses_the_whole_set_and_a_bad_one_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    sampled = ["--skb-sample", str(COLLECTOR_SKB_SAMPLE), "--skb-stages", "ends", "--skb-window", COLLECTOR_SKB_WINDOW]
    assert collector_providers({"NETTRAIL_PROVIDERS": PER_PACKET_PROVIDERS}) == [
        "--providers", "tcp,siftr,skb,ip-flows,udp",
    ]  # fmt: skip
    # skb-lifecycle in it is sampled as in the default set, and NETTRAIL_SKB_SAMPLE still sets N
    assert collector_providers({"NETTRAIL_PROVIDERS": " tcp, skb-lifecycle ,tcp"}) == [
        "--providers", "tcp,skb-lifecycle", *sampled,
    ]  # fmt: skip
    assert collector_providers({"NETTRAIL_PROVIDERS": "udp,skb-lifecycle", "NETTRAIL_SKB_SAMPLE": "0"}) == [
        "--providers", "udp",
    ]  # fmt: skip
    assert capsys.readouterr().err == ""
    for bad in ("tcp,bogus", ",,"):
        assert collector_providers({"NETTRAIL_PROVIDERS": bad}) == [
            "--providers", COLLECTOR_PROVIDERS + ",skb-lifecycle", *sampled,
        ]  # fmt: skip
        assert "$NETTRAIL_PROVIDERS takes providers from tcp, siftr" in capsys.readouterr().err


def test_an_inferred_stage_is_marked_as_one_wherever_a_lifecycle_is_shown(client: Client) -> None:
    """The copy and consume of a read buffer have no tracepoint: stamped at the recvmsg's
    return (an upper bound), their times are approximate (translators/skb.py), and the
    views say "(inferred)" (js/common.js stageName) from this flag."""
    t = time.time() - 5
    uuid = connection_uuid(HOST, BOOT, 31)
    seen = dict(provider="skb", skb_uid=31, conn_uuid=uuid, len=100)
    store_batch([
        SkbEvent(**env(HOST, t), **seen, probe="skb-rx-first", stage="rx-first", hook="tp_btf/netif_receive_skb"),
        SkbEvent(**env(HOST, t + 0.001), **seen, probe="skb-copy", stage="copy", hook="tp_btf/skb_copy_datagram_iovec"),
        SkbEvent(
            **env(HOST, t + 0.002), **seen, probe="skb-consume", stage="consume", end="consumed",
            hook="tp_btf/sock_recv_length", approx=list(INFERRED_APPROX),
        ),
    ])  # fmt: skip
    flags = [
        (s["stage"], s["inferred"]) for s in client.get("/api/dash/skb/31", {"host": HOST}).json()["skb"]["stages"]
    ]
    assert flags == [("rx-first", False), ("copy", False), ("consume", True)]
    [life] = [b for b in client.get("/api/dash/buffers").json()["lifecycles"] if b["skb_uid"] == 31]
    assert [s["inferred"] for s in life["stages"]] == [False, False, True]  # detail.lifecycles: every list of them
