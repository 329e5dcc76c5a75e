"""A capture or SIFTR log whose times are impossible (before 2000, more than a day ahead
of the server's clock) is refused, naming the packet or record, the field and the time
(webapp/traces/timestamps.py through webapp/traces/capture_store.py, issue 33 item 6):
the upload page answers 400 and stores nothing; `nettrail analyze --store` says so,
exits 1 and stores only what came before it. tests/test_ingest_impossible_times.py
has /api/ingest.
"""

from __future__ import annotations

import html
import time
from pathlib import Path

import msgspec
import pytest
from django.test import Client
from scapy.layers.inet import IP, TCP
from scapy.utils import wrpcap
from test_siftr_log import many_samples, render

from nettrail.cli import main
from webapp.traces.models import Host, SiftrSample, TcpSegment

pytest_plugins = ["api_fixtures"]
pytestmark = pytest.mark.django_db
T0 = 1_700_000_000.0
BEFORE_2000 = "s since the epoch is before 2000-01-01T00:00:00Z"


def write_pcap(path: Path, third_at: float, first_at: float = T0) -> Path:
    """Four packets of one connection, 10 ms apart from `first_at`, packet 3 at `third_at`."""
    c, s = IP(src="10.1.0.1", dst="10.1.0.2"), IP(src="10.1.0.2", dst="10.1.0.1")
    packets = [
        c / TCP(sport=40000, dport=80, flags="S", seq=100),
        s / TCP(sport=80, dport=40000, flags="SA", seq=500, ack=101),
        c / TCP(sport=40000, dport=80, flags="A", seq=101, ack=501),
        c / TCP(sport=40000, dport=80, flags="FA", seq=101, ack=501),
    ]
    for p, at in zip(packets, (first_at, first_at + 0.01, third_at, first_at + 0.03), strict=True):
        p.time = at
    wrpcap(str(path), packets)
    return path


def upload(client: Client, path: Path) -> tuple[int, str]:
    with path.open("rb") as f:
        answer = client.post("/captures/upload/", {"capture": f})
    return answer.status_code, html.unescape(answer.content.decode())


def test_an_upload_with_a_packet_from_before_2000_is_a_400_naming_it_and_stores_nothing(
    viewer_client: Client, tmp_path: Path
) -> None:
    status, page = upload(viewer_client, write_pcap(tmp_path / "old.pcap", 946_684_799.0))
    assert status == 400
    assert f"old.pcap: packet 3: ts_wall: 946684799.0 {BEFORE_2000}; nothing was stored" in page
    assert not Host.objects.filter(name="capture:old.pcap").exists()
    assert TcpSegment.objects.count() == 0


def test_an_upload_with_a_packet_two_days_ahead_is_a_400_naming_it_and_stores_nothing(
    viewer_client: Client, tmp_path: Path
) -> None:
    ahead = float(int(time.time()) + 2 * 86_400)  # pcap times are whole microseconds
    status, page = upload(viewer_client, write_pcap(tmp_path / "future.pcap", ahead))
    assert status == 400
    assert f"future.pcap: packet 3: ts_wall: {ahead!r} s since the epoch is after " in page
    assert "a day ahead of the server's clock; nothing was stored" in page
    assert not Host.objects.filter(name="capture:future.pcap").exists()


def test_an_upload_starting_at_the_first_second_of_2000_is_stored(viewer_client: Client, tmp_path: Path) -> None:
    path = write_pcap(tmp_path / "y2k.pcap", 946_684_800.02, first_at=946_684_800.0)
    with path.open("rb") as f:
        assert viewer_client.post("/captures/upload/", {"capture": f}).status_code == 303
    times = TcpSegment.objects.filter(host_id="capture:y2k.pcap").order_by("frame").values_list("frame", "ts_wall")
    assert [frame for frame, _ in times] == [1, 2, 3, 4]
    assert times[0][1] == 946_684_800.0


def test_analyze_store_refuses_the_packet_exits_1_and_keeps_only_the_packets_before_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_pcap(tmp_path / "old.pcap", 946_684_799.0)
    assert main(["analyze", str(path), "--store", "--packets", "--libxo", "json"]) == 1
    err = capsys.readouterr().err
    assert f"nettrail: analyze: {path}: packet 3: ts_wall: 946684799.0 {BEFORE_2000}: it and what follows" in err
    assert sorted(TcpSegment.objects.filter(host_id="old.pcap").values_list("frame", flat=True)) == [1, 2]


def test_a_siftr_log_with_a_sample_from_before_2000_is_refused_at_that_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = many_samples()[:6]
    samples[3] = msgspec.structs.replace(samples[3], ts_wall=946_684_799.5)
    path = tmp_path / "box.siftr"
    path.write_text(render(samples, "1.3.0", enable_time=samples[0].ts_wall, disable_time=samples[-1].ts_wall))
    with pytest.raises(SystemExit) as stopped:
        main(["analyze", str(path), "--store"])
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert f"nettrail: analyze: box.siftr: record 3 (siftr_sample, seq 4): ts_wall: 946684799.5 {BEFORE_2000}" in err
    assert SiftrSample.objects.filter(host_id="box.siftr").count() == 3
