"""Issue 18 item 9 in Chromium: every buffer-lifecycle view says how many buffers the
kernel follows (--skb-sample N, from the host's collector_status) beside the exact counts
of its last sampling report: the Buffers page's lifecycle table (the newest followed
buffers when nothing is chosen), one buffer's panel, and a connection's buffers; and,
for a host recording the ends only (--skb-stages ends, sampled's default), that the
transmit and receive entry stages are not recorded and how to enable them."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Any

import pytest

from translators.records import CollectorStatus, SamplingReport, SkbEvent, TcpStateChange, connection_uuid
from translators.skb import INFERRED_APPROX

from .conftest import Server, screenshot

pytestmark = pytest.mark.browser
HOST = "lifecycle-host"  # its own host: the newest collector_status is what the pages read
BOOT, UID, N = "boot-l", 777001, 64
STAGES = [("tx-first", None), ("xmit", None), ("rx", None), ("copy", None), ("consume", "consumed")]


def ingest_lifecycle(
    server: Server, host_id: str, conn: int, uid: int, stages: list[tuple[str, str | None]],
    inferred: frozenset[str] = frozenset(), **status: Any,
) -> tuple[Server, str, Callable[..., dict[str, Any]]]:  # fmt: skip
    """As a collector of `host_id` would: its status (`status`: skb_sample, skb_stages), a
    connection and one followed buffer's stages; -> (the host, the connection's uuid, env_
    for more records of that host)."""
    # a token made as the server's user (daphne_server.Server.make_token)
    host = Server(server.url, server.make_token(host_id), server.data_dir)
    seq = itertools.count(1)
    t = time.time() - 5
    uuid = connection_uuid(host_id, BOOT, conn)

    def env_(dt: float, **kw: Any) -> dict[str, Any]:
        return {
            "host_id": host_id,
            "boot_id": BOOT,
            "seq": next(seq),
            "ts_ns": int((t + dt) * 1e9),
            "ts_wall": t + dt,
            **kw,
        }

    flow = {"conn_uuid": uuid, "src": "127.0.0.1", "sport": 41000 + conn, "dst": "127.0.0.1", "dport": 8080}
    batch = [
        CollectorStatus(**env_(0), provider="nettrail", probe="status", providers=["tcp", "skb", "skb-lifecycle"],
                        attached={}, **status),
        TcpStateChange(**env_(0.1, provider="tcp", **flow), probe="state-change", prev_state="SYN_SENT",
                       state="ESTABLISHED"),
        *[SkbEvent(**env_(0.2 + i * 0.001, provider="skb", **flow), probe=f"skb-{s}", skb_uid=uid, stage=s, end=e,
                   len=1448, approx=list(INFERRED_APPROX) if s in inferred else []) for i, (s, e) in enumerate(stages)],
    ]  # fmt: skip
    assert host.ingest(batch) == {"stored": len(batch), "duplicates": 0, "tracing": None}
    return host, uuid, env_


@pytest.fixture(scope="module")
def sampled(server: Server) -> str:
    host, uuid, env_ = ingest_lifecycle(server, HOST, 5, UID, STAGES, skb_sample=N)
    report = SamplingReport(**env_(1), provider="nettrail", probe="sampling", event_type="skb_event",
                            setting=f"skb-sample {N}", window_s=1.0, observed=6400, emitted=100, ratio=64.0)  # fmt: skip
    assert host.ingest([report]) == {"stored": 1, "duplicates": 0, "tracing": None}
    return uuid


ENDS_HOST, ENDS_UID = "lifecycle-ends-host", 777002
ENDS = [("tx-first", None), ("rx", None), ("copy", None), ("consume", "consumed")]


@pytest.fixture(scope="module")
def ends_only(server: Server) -> str:
    # a TCP read buffer's consume has no tracepoint: inferred at its recvmsg's return
    return ingest_lifecycle(
        server, ENDS_HOST, 6, ENDS_UID, ENDS, frozenset({"consume"}), skb_sample=256, skb_stages="ends"
    )[1]


def test_every_lifecycle_view_says_one_buffer_in_n_is_followed(server: Server, page: Any, sampled: str) -> None:
    page.goto(f"{server.url}/buffers/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    note = page.locator("#life-sampling")
    expected = page.evaluate(
        f"`Sampling: {HOST}: 1 buffer in ${{NT.num({N})}} followed (last report: ${{NT.num(6400)}} buffers seen, "
        "${NT.num(100)} followed). Every stage recorded.`"
    )
    assert (note.inner_text(), note.get_attribute("data-skb-sample")) == (expected, str(N))
    assert note.get_attribute("data-skb-stages") == "all"  # a status from before --skb-stages: every stage
    # nothing chosen: the newest followed buffer is listed, whole
    row = page.locator("#lifecycles tbody tr", has_text=str(UID))
    assert row.count() == 1 and row.locator("td:nth-child(5)").inner_text() == "consumed"
    screenshot(page, "buffers-sampled-lifecycles")

    page.goto(f"{server.url}/buffers/?host={HOST}&skb={UID}")
    panel = page.locator("#skb-panel")
    panel.wait_for(state="visible")
    assert page.locator("#skb-sampling").inner_text() == expected

    page.goto(f"{server.url}/connections/{sampled}/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    conn_note = page.locator("#skbs-sampling")
    assert conn_note.get_attribute("data-skb-sample") == str(N)
    assert f"1 buffer in {N}" in conn_note.inner_text()
    assert page.locator("#skbs tbody tr", has_text=str(UID)).count() == 1


def test_every_lifecycle_view_says_which_stages_a_host_recording_the_ends_leaves_out(
    server: Server, page: Any, ends_only: str
) -> None:
    page.goto(f"{server.url}/buffers/?host={ENDS_HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    note = page.locator("#life-sampling")
    text = note.inner_text()
    assert note.get_attribute("data-skb-stages") == "ends" and "1 buffer in 256 followed" in text
    assert "Transmit stages (xmit-start, xmit) and receive entry stages before GRO are not recorded" in text
    assert "--skb-stages all" in text and "NETTRAIL_SKB_STAGES=all" in text
    # the buffer's stages as recorded, nothing drawn for the ones not seen
    row = page.locator("#lifecycles tbody tr", has_text=str(ENDS_UID))
    assert row.count() == 1 and "→ consume (inferred) +" in row.inner_text()
    screenshot(page, "buffers-lifecycles-ends-only")

    page.goto(f"{server.url}/buffers/?host={ENDS_HOST}&skb={ENDS_UID}")
    page.locator("#skb-panel").wait_for(state="visible")
    assert page.locator("#skb-sampling").inner_text() == text
    stages = page.locator("#skb-detail tbody tr td:nth-child(2)").all_inner_texts()
    assert stages == ["tx-first", "rx", "copy", "consume (inferred)"]  # an upper bound, said so

    page.goto(f"{server.url}/connections/{ends_only}/?host={ENDS_HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    conn_note = page.locator("#skbs-sampling")
    assert conn_note.get_attribute("data-skb-stages") == "ends"
    conn_text = conn_note.inner_text()
    assert "1 buffer in 256" in conn_text and "not recorded" in conn_text and "--skb-stages all" in conn_text
    assert "→ consume (inferred) +" in page.locator("#skbs tbody tr", has_text=str(ENDS_UID)).inner_text()
