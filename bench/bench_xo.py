"""Benchmark: xo JSON and XML rendering of SIFTR samples against json.dumps and xml.etree.

`main()` renders N (default 1,000,000) SiftrSample records, generated one at a time,
through xo.render_records in JSON and XML, and renders the same records with the
standard library in the same run: json.dumps(msgspec.to_builtins(rec)) and an
xml.etree Element per record serialised with ET.tostring. xo JSON uses `underscores`,
so both JSON outputs carry the same names and values (checked on a sample first).
Every contender writes into the same counting sink (no I/O is timed). The run is split
into interleaved rounds and timed in process CPU seconds, so other load on the machine
shifts all contenders alike. Prints records/s and the xo/peer time ratio, and with a
full-size run writes the figures to docs/benchmarks.md ("## xo rendering").
Keep in sync with: xo/ (what is measured), docs/benchmarks.md (the section it owns).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import msgspec  # noqa: E402
from doc_section import DOC, write_section  # noqa: E402

from translators.records import SiftrSample, to_builtins  # noqa: E402
from xo import parse_libxo, render_records  # noqa: E402

SECTION = "## xo rendering"
FULL = 1_000_000

TEMPLATE = SiftrSample(
    host_id="web-01", boot_id="7f3c2a9e-52b1-4c7e-9a0d-3e1f00c0ffee", seq=0, ts_ns=81_234_567_890_123,
    ts_wall=1764403200.123456, provider="siftr", probe="siftr", hook="tp_btf/tcp_probe", cpu=1,
    netns=4026531840, ctx="task", conn_uuid="0c0ffee0-52b1-4c7e-9a0d-3e1f00c0ffee", sock_cookie=16417,
    pid=31337, tgid=31330, comm="iperf3", uid=1000, gid=1000, cgroup_id=4321, attribution="current",
    approx=["rttvar"], ip_ver=4, src="10.0.0.5", sport=44312, dst="10.0.0.9", dport=5201, direction="out",
    snd_cwnd=14480, snd_ssthresh=28960, snd_wnd=64256, rcv_wnd=65535, t_flags=0x1E0, t_flags2=0x10,
    conn_state=4, mss=1448, srtt=2310, rttvar=480, rto=204_000, sack_enabled=True, snd_scale=7, rcv_scale=7,
    snd_buf_hiwater=16384, snd_buf_cc=2896, rcv_buf_hiwater=131072, rcv_buf_cc=0, sent_inflight_bytes=2896,
    t_segqlen=0, flowid=0x5A17C0DE, flowtype=2, snd_una=3_141_592_653, snd_nxt=3_141_595_549, packets_out=2,
    sacked_out=0, lost_out=0, retrans_out=0, th_seq=3_141_592_653, th_ack=2_718_281_828, data_sz=1448,
    ca_state="Open", cc_algo="cubic",
)  # fmt: skip


def records(count: int, start: int = 0) -> Iterator[SiftrSample]:
    """Records made on demand (a generator in, as the collector feeds xo)."""
    for seq in range(start, start + count):
        yield msgspec.structs.replace(
            TEMPLATE,
            seq=seq,
            ts_ns=TEMPLATE.ts_ns + seq * 1000,
            ts_wall=TEMPLATE.ts_wall + seq / 1e6,
            snd_cwnd=14480 + (seq % 64) * 1448,
            srtt=2000 + seq % 997,
        )


class Sink:
    """A text stream that counts and drops what it is given."""

    def __init__(self) -> None:
        self.chars = 0

    def write(self, text: str) -> int:
        self.chars += len(text)
        return len(text)

    def flush(self) -> None:
        pass


def xo_json(count: int, start: int, sink: Sink) -> None:
    render_records(records(count, start), parse_libxo("json,underscores"), sink)  # type: ignore[arg-type]


def xo_xml(count: int, start: int, sink: Sink) -> None:
    render_records(records(count, start), parse_libxo("xml"), sink)  # type: ignore[arg-type]


def peer_json(count: int, start: int, sink: Sink) -> None:
    sink.write('{"nettrail": {"siftr_sample": [')
    for n, rec in enumerate(records(count, start)):
        sink.write((", " if n else "") + json.dumps(to_builtins(rec)))
    sink.write("]}}\n")


def _text(value: Any) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def peer_xml(count: int, start: int, sink: Sink) -> None:
    sink.write("<nettrail>")
    for rec in records(count, start):
        elem = ET.Element("siftr-sample")
        for name, value in to_builtins(rec).items():
            tag = name.replace("_", "-")
            if value is None:
                continue
            for item in value if isinstance(value, list) else (value,):
                ET.SubElement(elem, tag).text = _text(item)
        sink.write(ET.tostring(elem, encoding="unicode"))
    sink.write("</nettrail>")


CONTENDERS: dict[str, Callable[[int, int, Sink], None]] = {
    "xo json": xo_json,
    "json.dumps": peer_json,
    "xo xml": xo_xml,
    "xml.etree": peer_xml,
}


class Keep(Sink):
    """A sink that also keeps the text (for the sanity check)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return super().write(text)


def check_same_data() -> None:
    """xo JSON (underscores) and json.dumps must describe the same records."""
    outputs = []
    for fn in (xo_json, peer_json):
        keep = Keep()
        fn(50, 0, keep)
        outputs.append(json.loads("".join(keep.parts))["nettrail"]["siftr_sample"])
    assert outputs[0] == outputs[1], "xo JSON and json.dumps disagree on the data"


def measure(total: int, rounds: int) -> dict[str, tuple[float, int]]:
    """Contender -> (CPU seconds, characters written), over interleaved rounds."""
    spent = dict.fromkeys(CONTENDERS, 0.0)
    chars = dict.fromkeys(CONTENDERS, 0)
    per_round = total // rounds
    for r in range(rounds):
        for name, fn in CONTENDERS.items():
            sink = Sink()
            t0 = time.process_time()
            fn(per_round, r * per_round, sink)
            spent[name] += time.process_time() - t0
            chars[name] += sink.chars
    return {name: (spent[name], chars[name]) for name in CONTENDERS}


def report(total: int, results: dict[str, tuple[float, int]]) -> list[str]:
    lines = [
        f"{total:,} SiftrSample records ({len(TEMPLATE.__struct_fields__)} fields each), process CPU seconds",
        "",
        "| style | contender | CPU s | records/s | MB out | xo/peer time |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for style, ours, peer in (("JSON", "xo json", "json.dumps"), ("XML", "xo xml", "xml.etree")):
        ratio = results[ours][0] / results[peer][0]
        for name in (ours, peer):
            secs, size = results[name]
            cell = f"{ratio:.2f}" if name == ours else "1.00"
            lines.append(f"| {style} | {name} | {secs:.1f} | {total / secs:,.0f} | {size / 1e6:.0f} | {cell} |")
    return lines


def write_doc(lines: list[str], rounds: int) -> None:
    write_section(
        SECTION,
        [
            f"`python bench/run.py xo` ({datetime.now(UTC):%Y-%m-%d}, {platform.python_implementation()} "
            f"{platform.python_version()}, {os.cpu_count()} CPUs shared with other work; {rounds} interleaved rounds). "
            "xo streams records from a generator into a counting sink through the per-kind jinja2 templates; "
            "the peers build the same data with `msgspec.to_builtins` and serialise each record with `json.dumps` "
            "or an `xml.etree` Element and `ET.tostring`. Peak RSS of the whole run: "
            f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (records are never all in memory).",
            "",
            *lines,
        ],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench_xo", description="xo JSON/XML rendering vs json.dumps / xml.etree")
    parser.add_argument("--records", type=int, default=FULL, help=f"records per contender (default {FULL:,})")
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds (default 10)")
    parser.add_argument("--write-docs", action="store_true", help="write docs/benchmarks.md even for a small run")
    args = parser.parse_args(argv)
    check_same_data()
    results = measure(args.records, args.rounds)
    total = args.records // args.rounds * args.rounds
    lines = report(total, results)
    print("\n".join(lines))
    if total >= FULL or args.write_docs:
        write_doc(lines, args.rounds)
        print(f"\nwritten to {DOC.relative_to(ROOT)} ({SECTION})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
