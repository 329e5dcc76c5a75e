"""Issue 18 item 9 on real traffic: `nettrail up`'s own collector arguments (its default
providers, with sampled buffer lifecycles, and its --ppl) trace a loopback TCP
connection, and the Buffers page and the connection's page show followed buffers whole,
each view saying one buffer in N is followed, in windows (0.2 s of every 2 s). The collector is `nettrail collect` with
exactly the arguments `nettrail up` builds (nettrail/commands/up.py), plus a port filter
that keeps the rest of this shared machine out of the test's host.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from nettrail.commands.up import COLLECTOR_PPL, COLLECTOR_SKB_SAMPLE, COLLECTOR_SKB_WINDOW, collector_providers

from .conftest import ROOT, Server, screenshot

pytestmark = [pytest.mark.browser, pytest.mark.kernel, pytest.mark.slow]
HOST = "up-defaults-host"  # its own host: the newest collector_status is what the pages read
WARMUP_S = 120.0  # the collector may first compile kmod/ (fresh checkout), then loads its programs
WRITES = 500  # one segment each, a batch: with their ACKs about 16 lifetimes at N = 64 if a window is open


def _api(server: Server, cookies: dict[str, str], path: str, **params: Any) -> Any:
    return requests.get(f"{server.url}/api/dash/{path}", params=params, cookies=cookies, timeout=10).json()


@pytest.fixture()
def up_collector(server: Server, tmp_path: Path) -> Iterator[tuple[socket.socket, list[str]]]:
    if os.geteuid() != 0:
        pytest.skip("needs root to load eBPF programs (nettrail collect)")
    if not Path("/sys/kernel/btf/vmlinux").exists():
        pytest.skip("needs kernel BTF (/sys/kernel/btf/vmlinux)")
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(8)
    port = lst.getsockname()[1]
    args = [*collector_providers({}), "--ppl", str(COLLECTOR_PPL)]  # as nettrail up runs it, by default
    env = {**os.environ, "NETTRAIL_HOST_ID": HOST, "NETTRAIL_DATA": str(tmp_path)}
    env.pop("NETTRAIL_SKB_SAMPLE", None)
    cmd = [sys.executable, "-m", "nettrail.cli", "collect", "--server", server.url, "--token", server.make_token(HOST)]
    cmd += [*args, "--filter", f"port={port}", "--flow-interval", "1", "--spool", str(tmp_path / "spool")]
    log = tmp_path / "collector.log"
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stderr=open(log, "w"))  # noqa: SIM115 - the child holds it
    try:
        yield lst, args
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        lst.close()
        if proc.returncode not in (0, -signal.SIGINT):
            print("collector log:", log.read_text()[-3000:])


def test_nettrail_ups_default_collector_shows_sampled_lifecycles(
    server: Server, page: Any, up_collector: tuple[socket.socket, list[str]]
) -> None:
    lst, args = up_collector
    n = COLLECTOR_SKB_SAMPLE
    assert args[:8] == [
        "--providers", "tcp,siftr-poll,skb,udp-calls,skb-lifecycle", "--skb-sample", str(n), "--skb-stages", "ends",
        "--skb-window", COLLECTOR_SKB_WINDOW,
    ]  # fmt: skip
    port = lst.getsockname()[1]
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    deadline = time.monotonic() + WARMUP_S
    while _api(server, cookies, "connections", q=f"port {port}", host=HOST)["total"] == 0:
        assert time.monotonic() < deadline, f"nettrail collect shipped nothing for port {port} in {WARMUP_S} s"
        socket.create_connection(("127.0.0.1", port)).close()
        lst.accept()[0].close()
        time.sleep(0.5)
    client = socket.create_connection(("127.0.0.1", port))
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server_side, _ = lst.accept()
    uuid, stages = "", list[str]()
    deadline = time.monotonic() + 60
    while not uuid and time.monotonic() < deadline:  # a followed data segment consumed, and the counts reported
        # writes spread over time: lifecycles are followed in windows (0.2 s of every 2 s)
        for i in range(WRITES):  # one segment each, read whole before the next is sent
            client.sendall(b"u" * (200 + i % 50))
            got = 0
            while got < 200 + i % 50:
                got += len(server_side.recv(5000))
        ours = {r["conn_uuid"] for r in _api(server, cookies, "connections", q=f"port {port}", host=HOST)["rows"]}
        d = _api(server, cookies, "buffers", host=HOST)
        # one of this test's writes (200-249 bytes of payload): not a SYN, FIN or pure ACK,
        # which are consumed unread, nor another program's traffic on this host
        whole = [
            life
            for life in d["lifecycles"]
            if life["end"] == "consumed" and life["conn_uuid"] in ours and life["stages"][0]["len"] >= 200
        ]
        if whole and d["sampling"] and d["sampling"][0]["last"]:
            uuid = whole[0]["conn_uuid"]
            stages = [st["stage"] for st in whole[0]["stages"]]
        else:
            time.sleep(0.3)
    assert uuid, "no followed buffer consumed within 60 s"
    # followed whole: its start, receive, reader and end (sampled: no transmit stage hook)
    assert stages == ["tx-first", "rx", "copy", "consume"]
    client.close()
    server_side.close()

    page.goto(f"{server.url}/buffers/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    note = page.locator("#life-sampling")
    assert note.get_attribute("data-skb-sample") == str(n)
    assert f"{HOST}: 1 buffer in {n} followed" in note.inner_text()
    assert note.get_attribute("data-skb-stages") == "ends" and "--skb-stages all" in note.inner_text()
    # followed in windows, and said so beside the lifecycles, with the windows' open time
    assert note.get_attribute("data-skb-window") == COLLECTOR_SKB_WINDOW
    assert "attached 0.2 s of every 2 s (10% of the time)" in note.inner_text()
    assert " s of windows, " in note.inner_text()
    consumed = page.locator("#lifecycles tbody tr", has_text="consumed")
    assert consumed.count() >= 1
    screenshot(page, "buffers-up-default-lifecycles")

    page.goto(f"{server.url}/connections/{uuid}/?host={HOST}")
    page.wait_for_selector("body[data-loaded='1']")
    conn_note = page.locator("#skbs-sampling")
    assert conn_note.get_attribute("data-skb-sample") == str(n)
    assert f"1 buffer in {n}" in conn_note.inner_text() and "not recorded" in conn_note.inner_text()
    assert conn_note.get_attribute("data-skb-window") == COLLECTOR_SKB_WINDOW
    assert "Followed in windows only" in conn_note.inner_text()
    assert page.locator("#skbs tbody tr").count() >= 1
