"""`nettrail collect` as a user runs it: argument errors, missing privileges, output shapes."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

from tests.collect_process import ROOT, Collector
from tests.kernel_support import bound_listener
from translators.records import BY_KIND, from_json

ENVELOPE = ("provider", "probe", "seq", "ts_ns", "sock_cookie", "pid", "tgid", "comm", "uid", "approx")


def run_collect(*args: str, user: int | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "nettrail.cli", "collect", *args]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", "--", *cmd]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("NETTRAIL_TOKEN", None)  # the --server cases below say which token is missing
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to switch to nobody (setpriv)")
def test_it_says_in_one_line_what_it_needs_when_run_as_an_ordinary_user() -> None:
    proc = run_collect("--duration", "1", user=65534)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("nettrail collect: loading eBPF programs needs root, or CAP_BPF and CAP_PERFMON")
    assert proc.stdout == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--providers", "tcp,mbuf"],
            "--providers: unknown mbuf; choose from tcp, siftr, tcpdebug, ip, udp, skb, skb-lifecycle, ip-flows, udp-calls, "
            "siftr-poll",
        ),
        (["--filter", "port=99999"], "bad filter 'port=99999': port must be 1-65535"),
        (["--filter", "host=1"], "bad filter 'host=1': use pid=N, port=N, addr=IP, cgroup=ID or netns=INODE"),
        (["--filter", "addr=1.2.3"], "bad filter 'addr=1.2.3': '1.2.3' is not a valid addr"),
        (["--ppl", "0"], "--ppl must be at least 1"),
        (["--ip-sample", "-1"], "--ip-sample must be 0 (counters only) or a positive N"),
        (["--ip-flows-max", "0"], "--ip-flows-max must be between 1 and 1048576"),
        (["--stats-interval", "0"], "--stats-interval must be positive"),
        (["--poll-interval", "0"], "--poll-interval must be between 0.01 and 60 seconds"),
        (["--skb-window", "0.2"], "--skb-window '0.2': use OPEN/EVERY in seconds, e.g. 0.25/5"),
        (["--skb-window", "2/1"], "--skb-window '2/1': OPEN/EVERY in seconds with 0.05 <= OPEN < EVERY <= 3600"),
        (["--skb-window", "a/b"], "--skb-window 'a/b': use OPEN/EVERY in seconds, e.g. 0.25/5"),
        (["--out", "x.csv"], "--out x.csv: the file name must end in .jsonl or .msgpack"),
        (
            ["--server", "http://127.0.0.1:1"],
            "--server needs --token, --token-file or $NETTRAIL_TOKEN (the host's ingest token)",
        ),
        (
            ["--server", "http://127.0.0.1:1", "--token-file", "/nonexistent/token"],
            "--token-file /nonexistent/token: cannot read it (No such file or directory)",
        ),
        (
            ["--server", "http://127.0.0.1:1", "--token", "T", "--token-file", "F"],
            "give --token or --token-file, not both",
        ),
    ],
)
def test_it_rejects_bad_arguments_with_status_2_and_says_why(args: list[str], message: str) -> None:
    proc = run_collect(*args)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"nettrail collect: {message}"


def make_traffic(lst: socket.socket) -> None:
    lst.listen()
    client = socket.create_connection(lst.getsockname())
    server, _ = lst.accept()
    client.sendall(b"j" * 3000)
    server.recv(65536)
    client.close()
    server.recv(10)
    server.close()


def no_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys: {keys}"
    return dict(pairs)


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_BPF, CAP_PERFMON) to load eBPF programs")
def test_libxo_json_output_holds_one_list_per_record_kind_with_the_envelope() -> None:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with Collector("--providers", "tcp,siftr", "--filter", f"port={port}", "--libxo", "json") as collector:
        collector.wait_attached()
        make_traffic(lst)
        lst.close()
        status, out, err = collector.stop()
        assert status == 0, err
        doc = json.loads(out, object_pairs_hook=no_duplicate_keys)
        lists = doc["nettrail"]
        assert {"tcp_state", "siftr_sample", "connection"} <= set(lists)
        for name, items in lists.items():
            assert isinstance(items, list) and items
            for item in items:
                assert item["kind"] == name
                assert all(f in item for f in ENVELOPE)
        states = [s for s in lists["tcp_state"] if s["dport"] == port]
        assert {"SYN_SENT", "ESTABLISHED", "FIN_WAIT_1"} <= {s["state"] for s in states}
        assert all({"src", "sport", "dst", "dport"} <= set(s) for s in states)


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_BPF, CAP_PERFMON) to load eBPF programs")
@pytest.mark.parametrize("suffix", [".jsonl", ".msgpack"])
def test_out_files_hold_every_record_in_the_wire_form_with_consecutive_seq(suffix: str, tmp_path: Path) -> None:
    path = tmp_path / f"records{suffix}"
    lst = bound_listener()
    port = lst.getsockname()[1]
    with Collector("--providers", "tcp", "--filter", f"port={port}", "--out", str(path)) as collector:
        collector.wait_attached()
        make_traffic(lst)
        lst.close()
        status, out, err = collector.stop()
        assert status == 0 and out == b"", err
        if suffix == ".jsonl":
            records = [from_json(line) for line in path.read_bytes().splitlines()]
        else:
            records = [
                BY_KIND[d["kind"]](**{k: v for k, v in d.items() if k != "kind"})
                for d in msgpack.Unpacker(open(path, "rb"), raw=False)
            ]
        kinds = {r.kind for r in records}
        assert {"tcp_state", "connection"} <= kinds
        seqs = [r.seq for r in records]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
        made = ("loss_report", "stack_counter", "collector_status", "collector_stats", "sampling_report")
        # the collector's own sock_diag reads (listen-queue, listen-overflow) are no ring events
        from_ring = [r for r in records if r.kind not in made and r.hook != "sock_diag/inet_diag"]
        inferred = sum(1 for r in records if r.kind == "tcp_state" and r.inferred)  # type: ignore[attr-defined]
        assert f"events received {len(from_ring) - inferred}" in err


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_BPF, CAP_PERFMON) to load eBPF programs")
def test_text_output_streams_lines_while_it_runs() -> None:
    lst = bound_listener()
    port = lst.getsockname()[1]
    with Collector("--providers", "tcp", "--filter", f"port={port}") as collector:
        collector.wait_attached()
        make_traffic(lst)
        lst.close()
        assert collector.proc.stdout is not None
        # the text style's tables arrive before the collector stops: what is attached (H3)
        # first, then the state changes, one table row per record
        lines = [collector.proc.stdout.readline().decode() for _ in range(4)]
        assert lines[0].split() == ["TIME", "PROBE"], lines
        assert lines[1].split()[1] == "status", lines
        assert lines[2].split()[:2] == ["providers", "tcp"], lines
        line = ""
        for _ in range(20):  # the status's detail lines, a blank line and the tcp_state header come first
            line = collector.proc.stdout.readline().decode()
            if line[:1].isdigit() and line.split()[1] == "state-change":
                break
        fields = line.split()
        assert fields[1] == "state-change" and fields[2].startswith("127.0.0.1:") and fields[-1] == "LISTEN", line
        status, _, err = collector.stop()
        assert status == 0, err


@pytest.mark.kernel
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_BPF, CAP_PERFMON) to load eBPF programs")
@pytest.mark.parametrize(
    ("args", "stages"),
    [(["--skb-sample", "8"], "ends"), (["--skb-sample", "8", "--skb-stages", "all"], "all"), ([], "all")],
    ids=["sampled", "sampled-all-stages", "every-buffer"],
)
def test_sampled_lifecycles_attach_no_stage_hook_unless_asked_and_the_status_says_which(
    args: list[str], stages: str
) -> None:
    from collector.bpf.loader import SKB_STAGE_PROGRAMS

    with Collector("--providers", "skb-lifecycle", "--filter", "port=9", *args, "--libxo", "json") as collector:
        attached = collector.wait_attached()
        status, out, err = collector.stop()
    assert status == 0, err
    [rec] = json.loads(out)["nettrail"]["collector_status"]
    assert (rec["skb_sample"], rec["skb_stages"]) == (8 if args else 1, stages)
    hooks = set(attached) & SKB_STAGE_PROGRAMS
    assert set(rec["attached"]) & SKB_STAGE_PROGRAMS == hooks
    assert hooks == (set() if stages == "ends" else SKB_STAGE_PROGRAMS - set(rec["absent"]))
    assert {"net_dev_queue", "netif_receive_skb", "skb_copy_datagram_iovec", "consume_skb", "kfree_skb"} <= set(
        attached
    )
