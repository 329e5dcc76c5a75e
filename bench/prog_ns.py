"""Where one provider set's in-kernel time goes, quickly: ns per run of each program
over a few blocks of bench/cpu_cost.py's loopback transfer with kernel.bpf_stats_enabled,
beside empty programs on the same tracepoints (the floor). No untraced rounds and no
ratio: this is the probe to run after each change to kmod/, not the budget's measure
(bench/bench_skb_sample.py is). Other work on the machine moves these numbers less than
it moves throughput or CPU time, but repeat a run before trusting a difference of a few
per cent. Needs root.

    python bench/prog_ns.py --providers tcp,siftr,skb,ip-flows,udp --ppl 8 [--skb-sample 256]
        [--object OLD.bpf.o] [--blocks 8] [--sizes]

--sizes only loads each object and prints its programs' JIT-compiled sizes (what the
verifier left of them for these providers): on loopback a program's cost is mostly the
cache lines it touches, its code's included, so a cut that shrinks the code shows here
before any transfer runs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from bpf_stats import per_program  # noqa: E402
from cpu_cost import Contender, Worker, measure  # noqa: E402

from collector.bpf.loader import Filters, KernelSession, Options  # noqa: E402


def sizes(opts: Options) -> dict[str, tuple[int, int]]:
    """name -> (xlated bytes, JIT-compiled bytes) of the object's programs as loaded."""
    with KernelSession(opts) as session:
        session.detach()
        ids = set(session.program_ids().values())
        out = subprocess.run(["bpftool", "-j", "prog", "list"], capture_output=True, text=True).stdout
    return {
        p["name"]: (int(p.get("bytes_xlated", 0)), int(p.get("bytes_jited", 0)))
        for p in json.loads(out or "[]")
        if p["id"] in ids
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", default="tcp,siftr,skb,ip-flows,udp")
    parser.add_argument("--ppl", type=int, default=8)
    parser.add_argument("--skb-sample", type=int, default=0)
    parser.add_argument("--object", type=Path, action="append", default=[], help="an object to compare (repeat)")
    parser.add_argument("--blocks", type=int, default=8, help="blocks of the transfer under bpf_stats")
    parser.add_argument("--block", type=int, default=256 << 20, help="bytes per block")
    parser.add_argument("--sizes", action="store_true", help="only the programs' loaded sizes, no transfer")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("prog_ns: needs root (loads eBPF programs)", file=sys.stderr)
        return 1
    settings = {"providers": tuple(args.providers.split(",")), "ppl": args.ppl, "skb_sample": args.skb_sample}
    objects: list[Path | None] = [None, *args.object]
    cs = [Contender("untraced", None)]
    for obj in objects:
        extra = {} if obj is None else {"object_path": obj}
        opts = Options(filters=Filters(), ringbuf_bytes=16 << 20, **settings, **extra)  # type: ignore[arg-type]
        cs.append(Contender(str(obj or "this tree's kmod/"), opts))
    if args.sizes:
        for c in cs[1:]:
            assert c.opts is not None
            print(f"{c.name}: program xlated/jited bytes")
            for name, (x, j) in sorted(sizes(c.opts).items(), key=lambda kv: -kv[1][1]):
                print(f"  {name} {x}/{j}")
        return 0
    worker = Worker(args.block)
    try:
        measure(cs, 0, worker, args.blocks)
    finally:
        worker.close()
    for c in cs[1:]:
        total = sum(t for _, t in c.stats.values())
        print(
            f"{c.name}: {total / c.stats_bytes * 1e3:.1f} ps/byte in programs, floor {c.floor / c.stats_bytes * 1e3:.1f}"
        )
        for part in per_program(c.stats, c.empty).split("; "):
            print(f"  {part}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
