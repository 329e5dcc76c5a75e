"""Kernel test: the UDP page's Errors column counts the datagrams a full receive buffer
refused, equal to the namespace's UdpRcvbufErrors (nstat), on the receiving process's row,
with the skb provider (SOCKET_RCVBUFF drops) and without it (udp-fail-queue events); the
port filter keeps that flow (issue 34 item 5)."""

from __future__ import annotations

import socket
import time

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.kernel_support import kernel, tracing
from tests.netns_lab import delta, netns_lab
from webapp.traces.store import store_batch

pytestmark = [*kernel, pytest.mark.django_db]

SENT = 200


@pytest.mark.parametrize("providers", [("udp-calls", "skb"), ("udp-calls",)], ids=["skb drops", "fail-queue events"])
def test_errors_count_the_receive_buffer_overflows_as_nstat_does(providers: tuple[str, ...]) -> None:
    with netns_lab() as ns:
        rx = ns.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the minimum: a few datagrams fit
        rx.bind(("127.0.0.1", 0))
        port = rx.getsockname()[1]
        tx = ns.socket(socket.AF_INET, socket.SOCK_DGRAM)
        before = ns.counters()
        with tracing(providers, netns=ns.inode) as cap:
            for _ in range(SENT):
                tx.sendto(b"d" * 500, ("127.0.0.1", port))
            rx.settimeout(0.3)
            read = 0
            try:
                while True:  # what the buffer held
                    rx.recv(2048)
                    read += 1
            except TimeoutError:
                pass
            time.sleep(0.2)
            records = cap.settle()
        after = ns.counters()
        for s in (rx, tx):
            s.close()
    refused = delta(before, after, "UdpRcvbufErrors")["UdpRcvbufErrors"]
    assert refused >= SENT // 2 and read + refused == SENT
    store_batch(records)
    c = Client()
    c.force_login(get_user_model().objects.create_user("viewer", password="pw-for-tests-only"))
    flows = c.get("/api/dash/udp", {"port": str(port)}).json()["flows"]
    reader = [f for f in flows if f["dport"] == port and f["datagrams"] == read]
    assert [(f["rcvbuf_drops"], f["errors"]) for f in reader] == [(refused, refused)]
    assert sum(f["rcvbuf_drops"] for f in flows) == refused  # counted once, on the reader's row
