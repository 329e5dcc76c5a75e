"""What the collector loads and gives up on this kernel, as JSON: the kernel matrix's coverage.

``describe(session)`` is what tests/test_collect_kernel_support.py writes to
``$NETTRAIL_MATRIX_OUT/coverage.json`` inside each guest of the kernel matrix
(tests/kernel_matrix.py), and docs/collector.md's support table is made from those files.
Run alone (``.venv/bin/python tests/kernel_matrix_probe.py``) it loads every provider in one
session, the way ``nettrail collect`` does, and prints the same JSON for this kernel.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.bpf import loader  # noqa: E402


def describe(s: loader.KernelSession, load_s: float) -> dict[str, object]:
    return {
        "release": os.uname().release,
        "object": s.path.name,
        "providers": list(s.opts.providers),
        "attached": sorted(s.links),
        "programs": {tp: s.choice.programs.get(tp, tp) for tp in sorted(s.links)},
        "absent": list(s.absent),
        "failed": dict(s.failed),
        "degraded": [list(d) for d in s.degraded],
        "context": loader.context_source(s.opts),
        "load_s": round(load_s, 1),
    }


def main() -> None:
    t0 = time.monotonic()
    with loader.KernelSession(loader.Options()) as s:
        print(json.dumps(describe(s, time.monotonic() - t0), indent=1))


if __name__ == "__main__":
    main()
