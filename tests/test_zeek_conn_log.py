"""Zeek conn.log output: `nettrail analyze --zeek`, `nettrail collect --zeek`, `format=zeek` exports.

Every log is parsed back with parsezeeklogs (a Zeek log reader from PyPI) with an error
callback that must stay silent, its header is checked line by line against Zeek's ASCII
writer's, and its values are compared field by field with the JSON output of the same
capture. Keep in sync with: xo/zeek.py, collector/sinks/zeek.py, webapp/reports/zeek.py,
docs/analyze.md ("Zeek conn.log").
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from parsezeeklogs import ZeekLog

from tests.capture_mix import build
from translators.records import AnalysisCounts, Connection
from xo import zeek

ROOT = Path(__file__).resolve().parent.parent
HEADER = [
    "#separator \\x09",
    "#set_separator\t,",
    "#empty_field\t(empty)",
    "#unset_field\t-",
    "#path\tconn",
]
FIELDS = (
    "ts uid id.orig_h id.orig_p id.resp_h id.resp_p proto service duration orig_bytes resp_bytes conn_state "
    "local_orig local_resp missed_bytes history orig_pkts orig_ip_bytes resp_pkts resp_ip_bytes tunnel_parents "
    "ip_proto"
).split()
TYPES = (
    "time string addr port addr port enum string interval count count string bool bool count string count count "
    "count count set[string] count"
).split()


def parse(text: str) -> list[dict[str, Any]]:
    """Records of a conn.log, through parsezeeklogs; any line it had to skip fails the test."""
    errors: list[tuple[int, str, Exception]] = []
    with ZeekLog(io.StringIO(text), on_error=lambda n, line, exc: errors.append((n, line, exc))) as log:
        records = list(log)
        assert log.path == "conn" and log.fields == FIELDS and [log.types[f] for f in FIELDS] == TYPES
    assert errors == []
    return records


def check_frame(text: str, open_stamp: str | None = None, close_stamp: str | None = None) -> list[str]:
    """Zeek's header and #close, exactly; -> the data lines."""
    lines = text.splitlines()
    assert lines[:5] == HEADER
    assert lines[5].startswith("#open\t")
    assert lines[6] == "#fields\t" + "\t".join(FIELDS) and lines[7] == "#types\t" + "\t".join(TYPES)
    assert lines[-1].startswith("#close\t") and not any(line.startswith("#") for line in lines[8:-1])
    if open_stamp is not None:
        assert lines[5] == f"#open\t{open_stamp}"
    if close_stamp is not None:
        assert lines[-1] == f"#close\t{close_stamp}"
    assert all(len(line.split("\t")) == len(FIELDS) for line in lines[8:-1])
    return lines[8:-1]


def analyze(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nettrail.cli", "analyze", str(path), *args],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def expected_from_json(c: dict[str, Any]) -> dict[str, Any]:
    """What conn.log must say about a connection of the JSON output (Zeek's rules applied)."""
    productive = c["duration"] > 0
    return {
        "ts": round(c["start"], 6), "id.orig_h": c["src"], "id.orig_p": c["sport"], "id.resp_h": c["dst"],
        "id.resp_p": c["dport"], "proto": c["proto"], "service": None,
        "duration": round(c["duration"], 6) if productive else None,
        "orig_bytes": c["bytes_orig"] if productive else None, "resp_bytes": c["bytes_resp"] if productive else None,
        "conn_state": c["conn_state"], "local_orig": None, "local_resp": None,
        "missed_bytes": c["missed_bytes"] or 0, "history": c["history"], "orig_pkts": c["packets_orig"],
        "orig_ip_bytes": c["wire_bytes_orig"], "resp_pkts": c["packets_resp"], "resp_ip_bytes": c["wire_bytes_resp"],
        "tunnel_parents": None, "ip_proto": {"tcp": 6, "udp": 17}[c["proto"]],
    }  # fmt: skip


def test_analyze_zeek_matches_the_json_output_field_by_field(tmp_path: Path) -> None:
    path = build(tmp_path / "mix.pcap")
    proc = analyze(path, "--zeek")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    check_frame(proc.stdout, "2025-11-29-08-00-00", "2025-11-29-08-01-06")  # first and last packet (network time)
    got = parse(proc.stdout)
    doc = json.loads(analyze(path, "--libxo", "json").stdout)["analyze"]
    assert len(got) == len(doc["connection"]) == 4
    for rec, conn in zip(got, doc["connection"], strict=True):
        uid = rec.pop("uid")
        assert rec == expected_from_json(conn)
        assert uid == zeek.uid_of(Connection(**_envelope(conn_uuid=conn["conn_uuid"]), proto="tcp"))
    assert [r["conn_state"] for r in got] == ["SF", "REJ", "RSTR", "SF"]
    assert [r["history"] for r in got] == ["ShADTadFf", "Sr", "ShADdr", "Dd"]
    assert [r["id.orig_h"] for r in got] == ["10.0.0.1", "10.0.0.1", "fd00::1", "10.0.0.1"]
    assert len({r["uid"] for r in parse(proc.stdout)}) == 4


def test_zeek_takes_no_libxo_or_packets(tmp_path: Path) -> None:
    path = build(tmp_path / "mix.pcap")
    for extra in (["--libxo", "json"], ["--packets"]):
        proc = analyze(path, "--zeek", *extra)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == "nettrail: analyze: --zeek writes conn.log only: it takes no --packets or --libxo\n"


def _envelope(**kw: Any) -> dict[str, Any]:
    return {"host_id": "h", "boot_id": "b", "seq": 1, "ts_ns": 1, "ts_wall": 1764403200.0, "provider": "tcp",
            "probe": "connection", **kw}  # fmt: skip


def write(*records: Connection) -> str:
    out = io.StringIO()
    zeek.write_conn_log(out, records, 1764403200.0, 1764403260.0)
    return out.getvalue()


def test_the_uid_is_c_and_base62_of_96_bits_of_the_conn_uuid() -> None:
    rec = Connection(**_envelope(conn_uuid="00000000-0000-0000-0000-0000ffffffff"), proto="tcp")
    assert zeek.uid_of(rec) == "C0"
    rec = Connection(**_envelope(conn_uuid="00000000-0000-0000-0000-003e00000000"), proto="tcp")
    assert zeek.uid_of(rec) == "C10"  # 62 in base 62
    rec = Connection(**_envelope(conn_uuid="ffffffff-ffff-ffff-ffff-ffffffffffff"), proto="tcp")
    assert zeek.uid_of(rec) == "C1f2SI9UJPXvb7vdJ1"  # 2**96 - 1: the longest uid, 18 characters as Zeek's


def test_a_connection_without_duration_has_no_duration_or_bytes_as_in_zeek() -> None:
    """Zeek's set_conn() logs duration, orig_bytes and resp_bytes only when the duration is > 0."""
    syn = Connection(
        **_envelope(conn_uuid="6f2d7a1e-3b5c-4c1e-9f51-6e6574747261"), proto="tcp", src="10.0.0.1", sport=40000,
        dst="10.0.0.2", dport=22, start=1764403200.5, end=1764403200.5, duration=0.0, packets_orig=1,
        packets_resp=0, bytes_orig=0, bytes_resp=0, wire_bytes_orig=60, wire_bytes_resp=0, conn_state="S0",
        history="S", missed_bytes=0, analysis=AnalysisCounts(),
    )  # fmt: skip
    text = write(syn)
    [line] = check_frame(text, "2025-11-29-08-00-00", "2025-11-29-08-01-00")
    assert line.split("\t")[7:12] == ["-", "-", "-", "-", "S0"]
    [rec] = parse(text)
    assert (rec["duration"], rec["orig_bytes"], rec["resp_bytes"], rec["orig_pkts"], rec["orig_ip_bytes"]) == (
        None, None, None, 1, 60,
    )  # fmt: skip


def test_values_that_look_like_markers_or_hold_separators_are_escaped_and_read_back() -> None:
    rec = Connection(**_envelope(), proto="udplite", src="10.0.0.1", sport=1, dst="10.0.0.2", dport=2, history="-")
    [line] = check_frame(write(rec))
    assert line.split("\t")[15] == "\\x2d"  # a history of '-' is not the unset marker
    [got] = parse(write(rec))
    assert got["history"] == "-" and got["proto"] == "unknown_transport" and got["ip_proto"] == 136
    assert zeek.escape("a\tb,c\\d\x01") == "a\\x09b\\x2cc\\x5cd\\x01"
    assert zeek.escape("(empty)") == "\\x28empty)"


def test_a_live_connection_uses_the_kernel_counters_and_leaves_the_rest_unset() -> None:
    live = Connection(
        **_envelope(conn_uuid="6f2d7a1e-3b5c-4c1e-9f51-6e6574747262"), proto="tcp", source="kernel",
        src="127.0.0.1", sport=8080, dst="127.0.0.1", dport=51000, start=1764403200.25, end=1764403201.0,
        duration=0.75, state="CLOSED", bytes_acked=1200, bytes_received=3000, segs_in=5, segs_out=4, total_retrans=0,
    )  # fmt: skip
    [got] = parse(write(live))
    assert {k: got[k] for k in ("duration", "orig_bytes", "resp_bytes", "orig_pkts", "resp_pkts")} == {
        "duration": 0.75, "orig_bytes": 1200, "resp_bytes": 3000, "orig_pkts": 4, "resp_pkts": 5,
    }  # fmt: skip
    unset = ("conn_state", "history", "missed_bytes", "orig_ip_bytes", "resp_ip_bytes", "service", "tunnel_parents")
    assert {k: got[k] for k in unset} == dict.fromkeys(unset)


def test_a_live_connection_this_host_accepted_is_written_from_its_originator() -> None:
    """conn_state/history are in Zeek's orientation (the SYN's sender is the originator):
    told that this host did not open it, the writer turns the local-first record around."""
    live = Connection(
        **_envelope(conn_uuid="6f2d7a1e-3b5c-4c1e-9f51-6e6574747262"), proto="tcp", source="kernel",
        src="127.0.0.1", sport=8080, dst="127.0.0.2", dport=51000, start=1764403200.25, end=1764403201.0,
        duration=0.75, state="CLOSED", bytes_acked=1, bytes_received=3001, segs_in=5, segs_out=4,
        conn_state="SF", history="ShADFf",
    )  # fmt: skip
    keys = ("id.orig_h", "id.orig_p", "id.resp_h", "id.resp_p", "orig_bytes", "resp_bytes", "orig_pkts", "resp_pkts")
    out = io.StringIO()
    writer = zeek.ZeekConnWriter(out, open_ts=1764403200.0)
    writer.write(live, local_orig=False)
    writer.write(live, local_orig=True)
    writer.close(1764403260.0)
    accepted, opened = parse(out.getvalue())
    assert [accepted[k] for k in keys] == ["127.0.0.2", 51000, "127.0.0.1", 8080, 3001, 1, 5, 4]
    assert [opened[k] for k in keys] == ["127.0.0.1", 8080, "127.0.0.2", 51000, 1, 3001, 4, 5]
    assert (accepted["conn_state"], accepted["history"]) == ("SF", "ShADFf")


# --- the dashboard / report export ------------------------------------------------------------------


@pytest.mark.django_db
def test_the_report_export_in_zeek_form_has_the_stored_connections(tmp_path: Path) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from nettrail.cli import main

    path = build(tmp_path / "mix.pcap")
    assert main(["analyze", str(path), "--store", "--libxo", "json"]) == 0
    client = Client()
    client.force_login(get_user_model().objects.create_user("viewer"))
    resp = client.get("/api/report", {"host": "mix.pcap", "format": "zeek"})
    assert resp.status_code == 200 and resp["Content-Type"] == "text/plain; charset=utf-8"
    assert resp["Content-Disposition"] == 'attachment; filename="nettrail.conn.log"'
    text = b"".join(resp.streaming_content).decode()  # type: ignore[attr-defined]
    # stamps: the first and the last connection's start, so an export is reproducible
    rows = check_frame(text, "2025-11-29-08-00-00", "2025-11-29-08-00-01")
    direct = check_frame(analyze(path, "--zeek").stdout)
    assert sorted(rows) == sorted(direct)  # the stored summaries say what the capture said
    got = parse(text)
    assert [r["id.orig_p"] for r in got] == [40000, 40001, 50000, 40002]  # in start order
    uuid = json.loads(analyze(path, "--libxo", "json").stdout)["analyze"]["connection"][2]["conn_uuid"]
    one = client.get(f"/api/connections/{uuid}/export", {"format": "zeek"})
    assert one["Content-Disposition"] == f'attachment; filename="{uuid}.conn.log"'
    [only] = parse(b"".join(one.streaming_content).decode())  # type: ignore[attr-defined]
    assert (only["id.orig_h"], only["conn_state"]) == ("fd00::1", "RSTR")
    page = client.get(f"/connections/{uuid}/").content.decode()  # the dashboard links the export
    assert (
        f'href="/api/connections/{uuid}/export?format=zeek&amp;host=mix.pcap" download data-format="zeek">Zeek conn.log</a>'
        in page
    )
    empty = client.get("/api/report", {"host": "mix.pcap", "since": "2030-01-01T00:00:00Z", "format": "zeek"})
    assert empty.status_code == 409 and empty.json() == {"error": "no connection summary in scope"}


# --- nettrail collect --zeek (real eBPF on loopback) ------------------------------------------------


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_BPF, CAP_PERFMON) to load eBPF programs")
def test_collect_zeek_writes_the_live_connections_as_conn_log() -> None:
    from collect_process import Collector

    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    port = lst.getsockname()[1]
    with Collector("--zeek", "--providers", "tcp", "--filter", f"port={port}") as collector:
        collector.wait_attached()
        lst.listen()
        client = socket.create_connection(("127.0.0.1", port))
        server, peer = lst.accept()
        client.sendall(b"z" * 3000)
        received = 0
        while received < 3000:
            received += len(server.recv(65536))
        client.close()
        assert server.recv(10) == b""
        server.close()  # the server socket ends at once (LAST_ACK -> CLOSE); the client waits in TIME_WAIT
        lst.close()
        status, out, err = collector.stop()
    assert status == 0, err
    text = out.decode()
    check_frame(text)
    got = parse(text)
    # both sockets' lines are written from the originator (the client), as their histories say
    [cli, srv] = sorted(
        (r for r in got if r["id.resp_p"] == port and r["id.orig_p"] == peer[1]), key=lambda r: -r["orig_bytes"]
    )
    # the client's bytes acked hold its SYN and FIN; its history has the FIN exchange its way round
    assert (cli["orig_bytes"], cli["resp_bytes"], cli["conn_state"], cli["history"]) == (3002, 1, "SF", "ShADFaf")
    assert (srv["id.orig_h"], srv["id.resp_h"], srv["proto"], srv["ip_proto"]) == ("127.0.0.1", "127.0.0.1", "tcp", 6)
    # the kernel's counters count a FIN as one byte: 3000 bytes and the client's FIN received,
    # no data and the server's own FIN acknowledged (documented in docs/analyze.md)
    assert (srv["orig_bytes"], srv["resp_bytes"]) == (3001, 1)
    # derived from the kernel's events (tcp provider only: the data letter from the counters)
    assert (srv["conn_state"], srv["history"]) == ("SF", "ShADFf")
    assert srv["resp_pkts"] >= 2 and srv["orig_pkts"] >= 3


def test_a_siftr_log_has_no_conn_log(tmp_path: Path) -> None:
    path = tmp_path / "log.siftr"
    path.write_text("enable_time_secs=1764403200\tenable_time_usecs=0\tsiftrver=1.3.0\n")
    proc = analyze(path, "--zeek")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"nettrail: analyze: {path}: a SIFTR log has no connection summaries for conn.log\n"
