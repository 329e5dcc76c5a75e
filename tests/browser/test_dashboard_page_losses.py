"""A page whose counts are short says so at its top (webapp/dashboard/page_losses.py): the
records of its kinds and of every kind lost on the way, per host, with the way to Status;
another page's kinds are not listed, and a host filter keeps that host's losses only."""

from __future__ import annotations

import time
from typing import Any

import pytest

from translators.records import LossReport

from .conftest import Server
from .dashboard_batch import BOOT, _seq

pytestmark = pytest.mark.browser
LOSSY, QUIET = "lossy-host", "quiet-host"


def loss(probe: str, hook: str, kind: str, lost: int, host: str = LOSSY) -> LossReport:
    return LossReport(
        host_id=host, boot_id=BOOT, seq=next(_seq), ts_ns=1, ts_wall=time.time(), provider="nettrail",
        probe=probe, hook=hook, event_type=kind, lost=lost, lost_total=lost,
    )  # fmt: skip


@pytest.fixture(scope="module")
def lossy(server: Server) -> None:
    other = Server(server.url, server.make_token(LOSSY), server.data_dir)
    reports = [loss("loss", "map/counters", "udp_datagram", 1234), loss("loss", "sink/spool", "spool", 2)]
    assert other.ingest(reports)["stored"] == 2
    quiet = Server(server.url, server.make_token(QUIET), server.data_dir)
    assert quiet.ingest([loss("loss", "map/counters", "udp_datagram", 0, QUIET)])["stored"] == 1  # nothing lost


def note_items(page: Any) -> list[str]:
    page.wait_for_selector("body[data-loaded='1']")
    return [t.strip() for t in page.locator("#page-losses li").all_inner_texts()]


def test_the_udp_page_names_the_datagrams_and_records_lost(server: Server, page: Any, lossy: None) -> None:
    page.goto(f"{server.url}/udp/?host={LOSSY}")
    assert note_items(page) == [
        f"{LOSSY}: 1,234 udp_datagram events lost: the ring buffer was full",
        f"{LOSSY}: 2 records of any kind lost: the collector's spool was full",
    ]
    note = page.locator("#page-losses")
    assert note.get_attribute("role") == "note"
    assert note.locator("a").get_attribute("href") == "/status/"
    # it stands above the page's tables
    assert note.evaluate("n => n.compareDocumentPosition(document.querySelector('#flows')) & 4") == 4


def test_other_pages_name_only_what_bears_on_them(server: Server, page: Any, lossy: None) -> None:
    for path in ("/buffers/", "/counters/"):
        page.goto(f"{server.url}{path}?host={LOSSY}")
        assert note_items(page) == [f"{LOSSY}: 2 records of any kind lost: the collector's spool was full"], path


def test_a_host_without_losses_shows_no_note(server: Server, page: Any, lossy: None) -> None:
    page.goto(f"{server.url}/udp/?host={QUIET}")
    page.wait_for_selector("body[data-loaded='1']")
    assert page.locator("#page-losses").count() == 0
    page.select_option("#select select[name=host]", LOSSY)  # the filter changed in place: the note follows
    page.locator("#select button[type=submit]").click()
    page.wait_for_selector("#page-losses li")
    assert len(page.locator("#page-losses li").all()) == 2
