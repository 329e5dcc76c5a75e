"""`nettrail analyze` on real kernel traffic agrees with tshark, connection by connection.

One lab run (tests/capture_lab.py: client / router / server namespaces, an nftables loss
rule on two ports) records nine scenarios (seven over IPv4, bulk and loss again over IPv6)
from both ends; every TCP connection's
tcp.analysis counts and per-direction packets/bytes must equal tshark's (Debian 12's
tshark is Wireshark 4.0, so the analysis runs with --wireshark 4.0), and each scenario
must come out with the connection state it really had.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.capture_lab import CLIENT_IP, CLIENT_IP6, PORTS, SERVER_IP, SERVER_IP6, record_scenarios
from tests.tshark_ref import first_letters, once_order, tshark_streams

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create network namespaces and run tcpdump"),
    pytest.mark.skipif(
        not (shutil.which("tshark") and shutil.which("tcpdump") and shutil.which("nft")),
        reason="needs tshark, tcpdump and nft",
    ),
]

COMPARED = (
    "retransmission", "fast_retransmission", "spurious_retransmission", "duplicate_ack", "out_of_order", "lost_segment",
    "ack_lost_segment", "zero_window", "zero_window_probe", "zero_window_probe_ack", "window_full", "window_update",
    "keep_alive", "keep_alive_ack", "reused_ports",
)  # fmt: skip


def analyze(pcap: Path, *extra: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "nettrail.cli", "analyze", str(pcap), "--libxo", "json", *extra]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120).stdout
    return json.loads(out)["analyze"]  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def captures(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    client, server = record_scenarios(tmp_path_factory.mktemp("lab"))
    return {"client": client, "server": server}


@pytest.fixture(scope="module")
def results(captures: dict[str, Path]) -> dict[str, dict[str, Any]]:
    return {view: analyze(path, "--wireshark", "4.0") for view, path in captures.items()}


def by_port(result: dict[str, Any], proto: str = "tcp") -> dict[int, dict[str, Any]]:
    return {c["dport"]: c for c in result["connection"] if c["proto"] == proto}


@pytest.mark.parametrize("view", ["client", "server"])
def test_it_counts_every_analysis_flag_like_tshark(
    captures: dict[str, Path], results: dict[str, Any], view: str
) -> None:
    ref = tshark_streams(captures[view])
    conns = [c for c in results[view]["connection"] if c["proto"] == "tcp"]
    assert sorted(c["stream"] for c in conns) == sorted(ref)
    for conn in conns:
        want = {name: ref[conn["stream"]].flags[name] for name in COMPARED}
        got = {name: conn["analysis"][name] for name in COMPARED}
        assert got == want, f"{view} stream {conn['stream']} (port {conn['dport']})"


@pytest.mark.parametrize("view", ["client", "server"])
def test_it_counts_packets_and_bytes_per_direction_like_tshark(
    captures: dict[str, Path], results: dict[str, Any], view: str
) -> None:
    ref = tshark_streams(captures[view])
    for conn in (c for c in results[view]["connection"] if c["proto"] == "tcp"):
        r = ref[conn["stream"]]
        orig, resp = (conn["src"], conn["sport"]), (conn["dst"], conn["dport"])
        got = (conn["packets_orig"], conn["packets_resp"], conn["bytes_orig"], conn["bytes_resp"])
        assert got == (r.packets[orig], r.packets[resp], r.bytes[orig], r.bytes[resp]), f"{view} port {conn['dport']}"


def test_the_scenarios_really_happened(results: dict[str, Any]) -> None:
    """Guards the comparison above against a lab that silently produced nothing interesting."""
    client, server = by_port(results["client"]), by_port(results["server"])
    assert client[PORTS["loss"]]["analysis"]["retransmission"] > 0
    assert server[PORTS["loss"]]["analysis"]["lost_segment"] > 0
    assert client[PORTS["loss"]]["analysis"]["duplicate_ack"] > 0
    slow = client[PORTS["slow"]]["analysis"]
    assert slow["zero_window"] > 0 and slow["window_full"] > 0 and slow["keep_alive"] > 0  # Linux probes at snd_una - 1
    assert client[PORTS["keepalive"]]["analysis"]["keep_alive"] >= 2
    assert client[PORTS["keepalive"]]["analysis"]["keep_alive_ack"] >= 2
    assert client[PORTS["bulk"]]["bytes_orig"] >= 1 << 20  # retransmitted payload counts too, as in tcp.len
    assert client[PORTS["loss6"]]["analysis"]["retransmission"] > 0
    assert server[PORTS["loss6"]]["analysis"]["lost_segment"] > 0
    assert (client[PORTS["bulk6"]]["ip_ver"], client[PORTS["bulk6"]]["src"], client[PORTS["bulk6"]]["dst"]) == (
        6,
        CLIENT_IP6,
        SERVER_IP6,
    )


def test_it_derives_zeek_states_for_each_scenario(captures: dict[str, Path], results: dict[str, Any]) -> None:
    for view in ("client", "server"):
        conns = by_port(results[view])
        ref = first_letters(captures[view])
        assert conns[PORTS["refused"]]["conn_state"] == "REJ"
        assert conns[PORTS["refused"]]["history"] == "Sr"
        assert conns[PORTS["abort"]]["conn_state"] == "RSTO"
        assert conns[PORTS["abort"]]["history"].endswith("R")
        for port in ("bulk", "loss", "slow", "keepalive", "bulk6", "loss6"):
            assert conns[PORTS[port]]["conn_state"] == "SF", port
            # mostly ShAD, but a loaded machine may show the server's bare ACK before the data
            history = conns[PORTS[port]]["history"]
            assert history.startswith("ShA") and once_order(history) == ref[conns[PORTS[port]]["stream"]], port
            v6 = port.endswith("6")
            assert conns[PORTS[port]]["src"] == (CLIENT_IP6 if v6 else CLIENT_IP)
            assert conns[PORTS[port]]["dst"] == (SERVER_IP6 if v6 else SERVER_IP)
            assert conns[PORTS[port]]["direction_guessed"] is False
        assert "w" in conns[PORTS["slow"]]["history"]
    # the server's capture point is past the lossy router: it misses segments (holes,
    # Wireshark's lost_segment) that the retransmissions fill, which Zeek reports as no gap;
    # only a segment the capture itself dropped (tcpdump on a loaded machine) is a gap
    # (the exact rule is tested on built captures in tests/test_flows_fidelity.py)
    loss = by_port(results["server"])[PORTS["loss"]]
    assert loss["analysis"]["lost_segment"] > 0 and "T" in loss["history"]
    assert ("G" in loss["history"]) == (loss["missed_bytes"] > 0)


def test_it_correlates_port_unreachable_with_the_udp_flow(results: dict[str, Any]) -> None:
    for view in ("client", "server"):
        udp = by_port(results[view], "udp")[PORTS["udp"]]
        assert (udp["icmp_error"], udp["icmp_errors"], udp["conn_state"]) == ("port-unreachable", 1, "S0")
        assert results[view]["totals"]["icmp_unreachable"] == 1


def test_it_raises_a_zero_window_stall_alert_for_the_slow_reader(results: dict[str, Any]) -> None:
    stalls = [a for a in results["client"].get("alert", []) if a["rule_id"] == "P4"]
    assert [a["dport"] for a in stalls] == [PORTS["slow"]]
    assert stalls[0]["severity"] == "warning"
    assert stalls[0]["metric"] >= 1.0


def test_upstream_semantics_differ_only_in_the_retransmission_family(
    captures: dict[str, Path], results: dict[str, Any]
) -> None:
    upstream = analyze(captures["server"])
    for old, new in zip(results["server"]["connection"], upstream["connection"], strict=True):
        if old["proto"] != "tcp":
            continue
        same = {
            k
            for k in old["analysis"]
            if k not in ("retransmission", "fast_retransmission", "out_of_order", "spurious_retransmission")
        }
        assert {k: old["analysis"][k] for k in same} == {k: new["analysis"][k] for k in same}
        family = ("retransmission", "out_of_order")
        assert sum(old["analysis"][k] for k in family) == sum(new["analysis"][k] for k in family)


def test_the_fast_path_and_the_full_state_machine_agree(captures: dict[str, Path], results: dict[str, Any]) -> None:
    """Without --packets most segments take the inlined fast path; with it every packet runs the full checks."""
    for view in ("client", "server"):
        full = analyze(captures[view], "--wireshark", "4.0", "--packets")
        keys = (
            "stream",
            "analysis",
            "packets_orig",
            "packets_resp",
            "bytes_orig",
            "bytes_resp",
            "conn_state",
            "history",
            "rtt_orig_mean_us",
            "retrans_bytes",
        )
        fast_view = [{k: c[k] for k in keys} for c in results[view]["connection"]]
        full_view = [{k: c[k] for k in keys} for c in full["connection"]]
        assert fast_view == full_view

        def alerts(doc: dict[str, Any]) -> list[tuple[Any, ...]]:
            return [(a["rule_id"], a["count"], a["message"], a["evidence"]) for a in doc.get("alert", [])]

        assert alerts(results[view]) == alerts(full)
