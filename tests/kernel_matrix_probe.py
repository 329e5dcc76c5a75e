"""Guest side of the kernel matrix: what the collector loads and gives up on this kernel, as JSON.

Run by tests/kernel_matrix.py inside each guest before the tests (and usable on any host:
``.venv/bin/python tests/kernel_matrix_probe.py``). It loads every provider in one session,
the way ``nettrail collect`` does, and prints the tracepoints attached, absent and failed and
the degradations the loader names (provider, field, why): docs/collector.md's support table
is made from this output. (One load only: under QEMU's TCG each takes 30-80 s.)
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collector.bpf import loader  # noqa: E402
from collector.bpf.build import BuildError  # noqa: E402


def probe(providers: tuple[str, ...]) -> dict[str, object]:
    t0 = time.monotonic()
    try:
        with loader.KernelSession(loader.Options(providers=providers)) as s:
            return {
                "providers": list(providers),
                "attached": sorted(s.links),
                "absent": list(s.absent),
                "failed": dict(s.failed),
                "degraded": [list(d) for d in getattr(s, "degraded", [])],
                "load_s": round(time.monotonic() - t0, 1),
            }
    except (loader.BpfError, BuildError) as e:
        return {"providers": list(providers), "error": str(e)[-1500:], "load_s": round(time.monotonic() - t0, 1)}


def main() -> None:
    out: dict[str, object] = {"release": os.uname().release}
    out["all"] = probe(loader.PROVIDERS)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
