"""Issue 18 item 9 in Chromium: every buffer-lifecycle view says how many buffers the
kernel follows (--skb-sample N, from the host's collector_status) beside the exact counts
of its last sampling report: the Buffers page's lifecycle table (the newest followed
buffers when nothing is chosen), one buffer's panel, and a connection's buffers."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from translators.records import CollectorStatus, SamplingReport, SkbEvent, TcpStateChange, connection_uuid

from .conftest import Server, screenshot

pytestmark = pytest.mark.browser
HOST = "lifecycle-host"  # its own host: the newest collector_status is what the pages read
BOOT, UID, N = "boot-l", 777001, 64
STAGES = [("tx-first", None), ("xmit", None), ("rx", None), ("copy", None), ("consume", "consumed")]


@pytest.fixture(scope="module")
def sampled(server: Server) -> str:
    # a token made as the server's user (daphne_server.Server.make_token)
    host = Server(server.url, server.make_token(HOST), server.data_dir)
    seq = itertools.count(1)
    t = time.time() - 5
    uuid = connection_uuid(HOST, BOOT, 5)

    def env_(dt: float, **kw: Any) -> dict[str, Any]:
        return {
            "host_id": HOST,
            "boot_id": BOOT,
            "seq": next(seq),
            "ts_ns": int((t + dt) * 1e9),
            "ts_wall": t + dt,
            **kw,
        }

    flow = {"conn_uuid": uuid, "src": "127.0.0.1", "sport": 41000, "dst": "127.0.0.1", "dport": 8080}
    batch = [
        CollectorStatus(**env_(0), provider="nettrail", probe="status", providers=["tcp", "skb", "skb-lifecycle"],
                        attached={}, skb_sample=N),
        TcpStateChange(**env_(0.1, provider="tcp", **flow), probe="state-change", prev_state="SYN_SENT",
                       state="ESTABLISHED"),
        *[SkbEvent(**env_(0.2 + i * 0.001, provider="skb", **flow), probe=f"skb-{s}", skb_uid=UID, stage=s, end=e,
                   len=1448) for i, (s, e) in enumerate(STAGES)],
        SamplingReport(**env_(1), provider="nettrail", probe="sampling", event_type="skb_event",
                       setting=f"skb-sample {N}", window_s=1.0, observed=6400, emitted=100, ratio=64.0),
    ]  # fmt: skip
    assert host.ingest(batch) == {"stored": len(batch), "duplicates": 0}
    return uuid


def test_every_lifecycle_view_says_one_buffer_in_n_is_followed(server: Server, page: Any, sampled: str) -> None:
    page.goto(f"{server.url}/buffers/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    note = page.locator("#life-sampling")
    expected = page.evaluate(
        f"`Sampling: {HOST}: 1 buffer in ${{NT.num({N})}} followed (last report: ${{NT.num(6400)}} buffers seen, "
        "${NT.num(100)} followed)`"
    )
    assert (note.inner_text(), note.get_attribute("data-skb-sample")) == (expected, str(N))
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
