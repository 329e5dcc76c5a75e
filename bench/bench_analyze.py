"""Benchmark: `nettrail analyze` on a >= 1,000,000-packet capture vs tshark's expert pass and a naive scapy loop.

The capture is built from real loopback traffic: iperf3 with four streams inside a
private network namespace (its own `lo`, MTU 1500, TSO/GSO/GRO off so segments stay
MTU-sized), recorded by tcpdump with a 96-byte snaplen until it holds PACKETS frames.
Each tool runs as its own process; wall time comes from the clock, CPU time, peak memory
and the context-switch and block-read counts (where wall time goes when it is not CPU
time) from wait4(). The scapy loop (`for p in PcapReader(f): pass` with scapy's
dissectors loaded) would take minutes, so it runs on a prefix and is extrapolated
linearly — the output says so. The tools alternate for ROUNDS rounds; medians count. Results go to docs/benchmarks.md under "## Capture analysis".

`--lossy` records many lossy connections instead (issue 17 item 7): three iperf3 servers,
three clients of 95 parallel streams each (285 connections), and an nftables rule in the
namespace dropping LOSS_PERCENT % of the data segments at the servers' input, after
tcpdump saw them on `lo`: the capture holds the originals and their retransmissions
(fast, after timeouts, spurious), duplicate ACKs and SACKs. Its figures go under
"## Capture analysis, lossy traffic".

Usage: python bench/run.py analyze [-- --pcap FILE] [--packets N] [--rounds R] [--lossy] [--no-write]
Keep in sync with: docs/benchmarks.md (its "## Capture analysis" sections).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from doc_section import DOC, write_section  # noqa: E402

SECTION = "## Capture analysis"
LOSSY_SECTION = "## Capture analysis, lossy traffic"
LOSS_PERCENT = 2
LOSSY_SERVERS = (5201, 5202, 5203)
LOSSY_STREAMS = 95  # per client: 285 connections in all
SCAPY_PREFIX = 20_000

SCAPY_LOOP = """
import sys, time
from scapy.all import PcapReader
limit = int(sys.argv[2]); n = 0
t, c = time.perf_counter(), time.process_time()
for _pkt in PcapReader(sys.argv[1]):
    n += 1
    if n >= limit:
        break
print(n, time.perf_counter() - t, time.process_time() - c)
"""


@dataclass
class Sample:
    """One run of one tool: wait4()'s figures (children included: nettrail's decoding worker)."""

    wall: float
    cpu: float  # user + system seconds
    rss: int  # peak bytes
    waits: int  # voluntary context switches: blocked on a pipe, a read, a lock
    preempted: int  # involuntary ones: runnable, but the CPU went to another process
    blocks_in: int  # 512-byte blocks read from the disk (0 when the file is in the page cache)


def run(cmd: list[str], stdout: int | None = subprocess.DEVNULL) -> tuple[Sample, str]:
    """-> the run's figures and its stdout text (when stdout is None: captured)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE if stdout is None else stdout, stderr=subprocess.DEVNULL, text=True
    )
    out = proc.stdout.read() if proc.stdout is not None else ""
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"bench_analyze: {' '.join(cmd[:4])} ... exited {proc.returncode}")
    sample = Sample(
        wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024, usage.ru_nvcsw, usage.ru_nivcsw,
        usage.ru_inblock,
    )  # fmt: skip
    return sample, out


def build_capture(path: Path, packets: int, lossy: bool = False) -> None:
    """Record `packets` frames of iperf3 traffic on a namespace's loopback (lossy: many
    connections, LOSS_PERCENT % of the data dropped after the capture point)."""
    ns = f"ntbench{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        sh = ["ip", "netns", "exec", ns]
        subprocess.run(sh + ["ip", "link", "set", "lo", "up", "mtu", "1500"], check=True)
        subprocess.run(
            sh + ["ethtool", "-K", "lo", "tso", "off", "gso", "off", "gro", "off"], check=True, capture_output=True
        )
        ports = LOSSY_SERVERS if lossy else (5201,)
        if lossy:  # the namespace's own nftables table: it goes with the namespace
            nft = sh + ["nft"]
            subprocess.run(nft + ["add", "table", "inet", "ntloss"], check=True)
            subprocess.run(
                nft + ["add", "chain", "inet", "ntloss", "in", "{ type filter hook input priority 0; }"], check=True
            )
            rule = (
                f"tcp dport {LOSSY_SERVERS[0]}-{LOSSY_SERVERS[-1]} meta length gt 100 "
                f"numgen random mod 100 lt {LOSS_PERCENT} drop"
            )
            subprocess.run(nft + ["add", "rule", "inet", "ntloss", "in", *rule.split()], check=True)
        for port in ports:
            server = subprocess.Popen(
                sh + ["iperf3", "-s", "-1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            procs.append(server)
        dump = subprocess.Popen(
            sh + ["tcpdump", "-i", "lo", "-s", "96", "-c", str(packets), "-w", str(path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        procs.append(dump)
        assert dump.stderr is not None
        dump.stderr.readline()  # "listening on lo ..."
        time.sleep(0.5)
        streams = str(LOSSY_STREAMS) if lossy else "4"
        for port in ports:
            client = subprocess.Popen(
                sh + ["iperf3", "-c", "127.0.0.1", "-p", str(port), "-t", "120", "-P", streams, "-l", "1400"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            procs.append(client)
        dump.wait(timeout=240)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        subprocess.run(["ip", "netns", "delete", ns], check=False)


def count_packets(path: Path) -> int:
    sys.path.insert(0, str(ROOT))
    from analysis.capture.pcap import CaptureReader

    with CaptureReader(str(path)) as r:
        return sum(len(b) for b in r.batches())


def measure(path: Path, rounds: int, total: int) -> dict[str, list[Sample]]:
    """Every round's figures of each tool; the tools alternate within a round.

    The scapy loop runs on a SCAPY_PREFIX-packet prefix; its times are scaled to `total`."""
    nettrail = [sys.executable, "-m", "nettrail.cli", "analyze", str(path), "--libxo", "json"]
    tshark = ["tshark", "-n", "-r", str(path), "-q", "-z", "expert"]
    scapy = [sys.executable, "-c", SCAPY_LOOP, str(path), str(SCAPY_PREFIX)]
    samples: dict[str, list[Sample]] = {"nettrail": [], "tshark": [], "scapy": []}
    for _ in range(rounds):
        for name, cmd in (("nettrail", nettrail), ("tshark", tshark), ("scapy", scapy)):
            got, out = run(cmd, stdout=None if name == "scapy" else subprocess.DEVNULL)
            if name == "scapy":  # the loop's own clocks, without interpreter start-up, scaled up
                n, seconds, cpu_seconds = out.split()
                got.wall, got.cpu = float(seconds) * total / int(n), float(cpu_seconds) * total / int(n)
            samples[name].append(got)
    return samples


def median(samples: list[Sample], field: str) -> float:
    return float(statistics.median(getattr(s, field) for s in samples))


def report(
    packets: int, size: int, samples: dict[str, list[Sample]], loads: tuple[float, float], lossy: bool = False
) -> list[str]:
    nt, ts, sc = samples["nettrail"], samples["tshark"], samples["scapy"]
    nt_wall, nt_cpu, nt_rss = median(nt, "wall"), median(nt, "cpu"), max(s.rss for s in nt)
    ts_wall, ts_cpu, ts_rss = median(ts, "wall"), median(ts, "cpu"), max(s.rss for s in ts)
    sc_wall, sc_cpu, sc_rss = median(sc, "wall"), median(sc, "cpu"), max(s.rss for s in sc)
    mib = 1 << 20
    rounds = len(nt)

    def spread(got: list[Sample]) -> str:
        return f"{min(s.wall for s in got):.2f} – {max(s.wall for s in got):.2f} s"

    def switches(got: list[Sample]) -> str:
        return f"{median(got, 'waits'):,.0f} / {median(got, 'preempted'):,.0f} / {median(got, 'blocks_in'):,.0f}"

    lines = [
        f"Measured {datetime.date.today().isoformat()} with `python bench/run.py analyze` on the 2-core development",
        f"machine (load average {loads[0]:.1f} at the start of the run, {loads[1]:.1f} at the end, other engineers' work running). Capture: {packets:,}",
        f"packets ({size / mib:.0f} MiB) of iperf3 traffic on a namespace loopback ("
        + (f"{len(LOSSY_SERVERS) * LOSSY_STREAMS} streams to three servers, {LOSS_PERCENT} % of the data dropped by "
           "nftables after the capture point," if lossy else "4 streams,") + " MTU 1500, offloads off),",
        "recorded by tcpdump with a 96-byte snaplen. Each tool as its own process, the tools interleaved in each of",
        f"{rounds} rounds; medians of the wall time and of the CPU time (user + system, children included), the largest",
        "peak RSS, and wait4()'s counts: voluntary context switches (waiting on a pipe or a read), involuntary ones",
        "(runnable but preempted: a busy machine) and blocks read from disk (0: the file was in the page cache).",
        "",
        "| tool | wall time (median) | min – max | CPU time (median) | packets/s (wall) | peak RSS | waits / preempted / blocks read | nettrail faster by (wall / CPU) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| `nettrail analyze FILE --libxo json` | {nt_wall:.2f} s | {spread(nt)} | {nt_cpu:.2f} s | {packets / nt_wall:,.0f} | {nt_rss / mib:.0f} MiB | {switches(nt)} | – |",
        f"| `tshark -r FILE -q -z expert` | {ts_wall:.2f} s | {spread(ts)} | {ts_cpu:.2f} s | {packets / ts_wall:,.0f} | {ts_rss / mib:.0f} MiB | {switches(ts)} | {ts_wall / nt_wall:.1f}x / {ts_cpu / nt_cpu:.1f}x |",
        f"| scapy `PcapReader` loop (extrapolated from {SCAPY_PREFIX:,} packets) | {sc_wall:.0f} s | – | {sc_cpu:.0f} s | {packets / sc_wall:,.0f} | {sc_rss / mib:.0f} MiB (prefix) | – | {sc_wall / nt_wall:.0f}x / {sc_cpu / nt_cpu:.0f}x |",
        "",
        f"Targets: ≥ 3x faster than tshark in wall time ({verdict(ts_wall / nt_wall >= 3)}) and ≥ 2x in CPU time "
        f"({verdict(ts_cpu / nt_cpu >= 2)}), "
        f"≥ 50x faster than the scapy loop (wall {verdict(sc_wall / nt_wall >= 50)}, CPU {verdict(sc_cpu / nt_cpu >= 50)}), "
        f"< 1 GiB peak for 1M packets ({verdict(nt_rss < 1 << 30)}). The scapy figure is a linear extrapolation: the full loop",
        "would take minutes, so only its first packets are timed.",
    ]  # fmt: skip
    return lines


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_analyze")
    parser.add_argument("--pcap", type=Path, help="reuse this capture instead of recording one")
    parser.add_argument("--packets", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print only, leave docs/benchmarks.md alone")
    parser.add_argument("--lossy", action="store_true", help="many lossy connections (its own section)")
    parser.add_argument("--keep", type=Path, help="keep the recorded capture at this path")
    args = parser.parse_args(argv)
    for tool in ("tshark", "tcpdump", "iperf3") + (("nft",) if args.lossy else ()):
        if not shutil.which(tool):
            print(f"bench_analyze: needs {tool}", file=sys.stderr)
            return 1
    with tempfile.TemporaryDirectory(prefix="ntbench") as tmp:
        path = args.pcap
        if path is None:
            if os.geteuid() != 0:
                print(
                    "bench_analyze: recording the capture needs root (network namespace, tcpdump); or pass --pcap",
                    file=sys.stderr,
                )
                return 1
            path = Path(tmp) / "loopback.pcap"
            print(f"recording {args.packets:,} packets of loopback iperf3 traffic ...", flush=True)
            build_capture(path, args.packets, args.lossy)
            if args.keep is not None:
                shutil.copyfile(path, args.keep)
        packets = count_packets(path)
        start_load = os.getloadavg()[0]
        samples = measure(path, args.rounds, packets)
        body = report(packets, path.stat().st_size, samples, (start_load, os.getloadavg()[0]), args.lossy)
    section = LOSSY_SECTION if args.lossy else SECTION
    print("\n".join([section, "", *body]))
    if not args.no_write:
        write_section(section, body)
        print(f"written to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
