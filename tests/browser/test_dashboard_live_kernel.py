"""Real traffic end to end: `nettrail collect` (eBPF, root) ships a loopback TCP connection
to the webapp, and the open connections page shows it within 2 seconds, then its close,
without a reload; its detail page lists the kernel's states in order."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from .conftest import Server, screenshot
from .kernel_env import WARMUP_S, collecting, need_root_and_btf

pytestmark = [pytest.mark.browser, pytest.mark.kernel, pytest.mark.slow]
LIVE_HOST = "live-kernel-host"  # its own: the counters tests check HOST's stack counters


class Listener:
    """A loopback TCP server that reads until each client closes."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = int(self.sock.getsockname()[1])
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    @staticmethod
    def _drain(conn: socket.socket) -> None:
        with conn:
            while conn.recv(65536):
                pass

    def close(self) -> None:
        self.sock.close()


@pytest.fixture()
def collector(server: Server, tmp_path: Path) -> Iterator[Listener]:
    need_root_and_btf("to load eBPF programs (nettrail collect)")
    listener = Listener()
    try:
        with collecting(server, tmp_path, "--filter", f"port={listener.port}", host=LIVE_HOST) as col:
            yield listener
        if col.proc.returncode not in (0, -signal.SIGINT):
            print("collector stderr:", col.log())
    finally:
        listener.close()


def _count(server: Server, cookies: dict[str, str], port: int) -> int:
    resp = requests.get(f"{server.url}/api/dash/connections", params={"q": f"port {port}"}, cookies=cookies, timeout=5)
    return int(resp.json()["total"])


def test_a_real_loopback_connection_appears_live_and_closes(server: Server, page: Any, collector: Listener) -> None:
    port = collector.port
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    deadline = time.monotonic() + WARMUP_S
    while _count(server, cookies, port) == 0:  # warm-up connections until the collector is tracing
        assert time.monotonic() < deadline, f"nettrail collect shipped nothing for port {port} in {WARMUP_S} s"
        socket.create_connection(("127.0.0.1", port)).close()
        time.sleep(0.3)
    page.goto(f"{server.url}/connections/?q=port+{port}")
    page.wait_for_function(
        f"(document.body.dataset.liveGroups || '').split(' ').includes('host.{LIVE_HOST}')", timeout=30_000
    )
    client = socket.create_connection(("127.0.0.1", port))
    client_port = client.getsockname()[1]
    sent = time.monotonic()
    client.sendall(b"x" * 200_000)
    row = page.locator("#conns tbody tr", has_text=f"127.0.0.1:{client_port}").first
    row.wait_for(timeout=30_000)
    print(f"real connection visible {time.monotonic() - sent:.3f} s after connect")
    assert row.locator('[data-col="state"]').inner_text() == "ESTABLISHED"
    client.close()
    page.wait_for_function(
        f"""[...document.querySelectorAll('#conns tbody tr')].some(r => r.textContent.includes('127.0.0.1:{client_port}')
              && !['ESTABLISHED'].includes(r.querySelector('[data-col="state"]').textContent))""",
        timeout=30_000,
    )
    uuid = row.get_attribute("data-uuid")
    page.goto(f"{server.url}/connections/{uuid}/")
    page.wait_for_selector("body[data-loaded='1']")
    states = page.locator("#timeline li.state").evaluate_all("els => els.map(e => e.dataset.state)")
    assert states[:2] in (["SYN_SENT", "ESTABLISHED"], ["SYN_RECEIVED", "ESTABLISHED"])
    screenshot(page, "connection-detail-live")
