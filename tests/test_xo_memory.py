"""Bounded memory: 100,000 records stream through render_records without piling up.

A child process (so earlier tests do not blur ru_maxrss) renders records pulled one at a
time from a generator into a sink that only counts what it is given. Output is ~100 MB
of JSON; if the formatter held records or output, peak RSS would grow by about that
much. The bound (24 MiB over the warmed-up baseline) leaves room for allocator noise.
Keep in sync with: xo/writer.py (render_records) and bench/bench_xo.py (the 1M-record run).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORDS = 100_000
BOUND_KIB = 24 * 1024

CHILD = textwrap.dedent(
    """
    import json, resource, sys
    import msgspec
    sys.path.insert(0, "tests")
    from record_samples import full_record
    from translators.records import SiftrSample
    from xo import parse_libxo, render_records

    class CountingSink:
        def __init__(self):
            self.chars = 0
            self.writes = 0
        def write(self, text):
            self.chars += len(text)
            self.writes += 1
            return len(text)
        def flush(self):
            pass

    template = full_record(SiftrSample)
    def records(n):
        for i in range(n):
            yield msgspec.structs.replace(template, seq=i)

    def peak_kib():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    result = {}
    for spec in sys.argv[2:]:
        render_records(records(2000), parse_libxo(spec), CountingSink())  # warm caches and templates
        before = peak_kib()
        sink = CountingSink()
        count = render_records(records(int(sys.argv[1])), parse_libxo(spec), sink)
        result[spec] = {"count": count, "chars": sink.chars, "writes": sink.writes, "delta_kib": peak_kib() - before}
    print(json.dumps(result))
    """
)


@pytest.mark.slow
def test_rendering_100000_records_keeps_peak_memory_bounded() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(RECORDS), "json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    for spec, run in result.items():
        assert run["count"] == RECORDS, spec
        assert run["chars"] > 90 * 1024 * 1024, spec  # the output that would have piled up
        assert run["writes"] >= RECORDS, spec  # written as it goes, at least once per record
        assert run["delta_kib"] < BOUND_KIB, f"{spec}: peak RSS grew by {run['delta_kib']} KiB"
