"""From a TCP connection to its packets (issue 18 item 4).

A live connection (the collector's records: SIFTR samples with snd_una/snd_nxt and
tcp_retransmit records, no packets) gets a time-sequence graph drawn from those kernel
records, and its pcap button is disabled with the reason written in the page. An
uploaded capture's connection gets the graph from its packets, and its pcap download is
a real capture holding exactly that connection's packets (read back with scapy).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from scapy.layers.inet import TCP
from scapy.utils import rdpcap

from translators.records import SiftrSample, TcpSegment

from .capture_story import write_story_capture
from .conftest import HOST, PAINTED, Server, screenshot
from .dashboard_batch import MSS, RETRANSMITTED, build

ISN = 1_000_000  # dashboard_batch's initial sequence number


def open_detail(server: Server, page: Any, uuid: str, host: str) -> None:
    page.goto(f"{server.url}/connections/{uuid}/?host={host}")
    page.wait_for_function("document.body.dataset.loaded === '1'")


def series(page: Any, name: str) -> list[Any]:
    return page.evaluate("() => NT.charts['chart-tseq'].data.map((s) => Array.from(s))")[
        ["t", "data", "retrans", "sack", "ack", "win"].index(name)
    ]


def test_a_live_connection_graphs_its_sequence_from_the_kernel_records_and_says_why_no_pcap(
    server: Server, page: Any
) -> None:
    batch = build(HOST, sport=40760, cookie=760)
    records: list[Any] = []
    k = 0
    for r in batch.records:
        if isinstance(r, TcpSegment):
            continue  # a live connection: the collector records no packets
        if isinstance(r, SiftrSample):
            una = ISN + 1 + k * MSS // 2
            r = msgspec.structs.replace(r, snd_una=una, snd_nxt=una + 4 * MSS, mss=MSS, sacked_out=2 if k == 50 else 0)
            k += 1
        records.append(r)
    assert server.ingest(records)["stored"] == len(records)
    open_detail(server, page, batch.uuid, HOST)
    assert "SIFTR samples" in page.locator("#tseq-source").inner_text()
    assert page.locator("#tseq-empty").is_hidden()
    retrans = [v for v in series(page, "retrans") if v is not None]
    assert retrans == [i * MSS for i in RETRANSMITTED]  # tcp_seq relative to the first snd_una
    acks = [v for v in series(page, "ack") if v is not None]
    assert acks[0] == 0 and acks[-1] == (k - 1) * MSS // 2
    sent = [v for v in series(page, "data") if v is not None]
    assert sent[-1] == acks[-1] + 4 * MSS
    assert [v for v in series(page, "sack") if v is not None] == [50 * MSS // 2 + 2 * MSS]
    labels = page.evaluate("() => NT.charts['chart-tseq'].series.map((s) => s.label)")
    assert labels[3] == "SACK (estimated)"  # an estimate is said to be one, on the chart itself
    wins = [v for v in series(page, "win") if v is not None]
    assert wins[0] == 65535 * 4
    assert page.evaluate(PAINTED, ["chart-tseq", "#0b5cad"]) > 50  # the snd_nxt line is drawn
    pcap = page.locator("#exports button[data-format=pcap]")
    assert pcap.is_disabled()
    assert page.locator("#exports a[data-format=pcap]").count() == 0
    assert page.locator("#why-pcap").inner_text().startswith("pcap: No packets to download")
    screenshot(page, "tseq-kernel")


@pytest.fixture(scope="module")
def capture_conn(server: Server, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Upload a capture (once) and return the transfer connection's uuid and the file."""
    path = write_story_capture(tmp_path_factory.mktemp("packets") / "packets.pcap")
    session = server.login()
    form = session.get(f"{server.url}/captures/").text
    token = form.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
    with path.open("rb") as f:
        answer = session.post(
            f"{server.url}/captures/upload/", files={"capture": f}, data={"csrfmiddlewaretoken": token},
            headers={"Referer": f"{server.url}/captures/"}, allow_redirects=False,
        )  # fmt: skip
    assert answer.status_code == 303, answer.text[-500:]
    rows = session.get(
        f"{server.url}/api/dash/connections", params={"q": 'host "capture:packets.pcap" and dport 80'}
    ).json()
    [row] = rows["rows"]
    return {"uuid": row["conn_uuid"], "host": row["host_id"], "path": path}


def test_an_uploaded_capture_graphs_its_packets_and_downloads_them_as_a_pcap(
    server: Server, page: Any, capture_conn: dict[str, Any], tmp_path: Path
) -> None:
    open_detail(server, page, capture_conn["uuid"], capture_conn["host"])
    assert page.locator("#tseq-source").inner_text() == "From the packets (tcp_segment records)."
    assert [v for v in series(page, "retrans") if v is not None] == [7 * 1000 + 1]  # the one lost segment
    assert len([v for v in series(page, "sack") if v is not None]) == 3
    assert page.evaluate("() => NT.charts['chart-tseq'].series[3].label") == "SACK"  # the packets' own blocks
    assert page.locator("#why-pcap").count() == 0
    assert page.locator("#tcpdebug-empty").inner_text() == (
        "No tcpdebug snapshots: capture:packets.pcap is an uploaded capture; "
        "tcpdebug snapshots come from a live collector's tcpdebug provider."
    )
    with page.expect_download() as info:
        page.click("#exports a[data-format=pcap]")
    target = tmp_path / "connection.pcap"
    info.value.save_as(target)
    got = rdpcap(str(target))
    original = [p for p in rdpcap(str(capture_conn["path"])) if TCP in p and 80 in (p[TCP].sport, p[TCP].dport)]
    assert len(got) == len(original) > 40
    assert [bytes(p) for p in got] == [bytes(p) for p in original]
    assert [float(p.time) for p in got] == pytest.approx([float(p.time) for p in original], abs=1e-6)
    screenshot(page, "tseq-capture")
