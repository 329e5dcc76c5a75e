"""Runs one writer process: ``python -m webapp.bus.writer_main [--name NAME]`` (started by ``nettrail serve``).

Needs REDIS_URL (and, for more than one writer, DATABASE_URL = PostgreSQL). A stable
--name lets a restarted writer take back its own pending entries at once, instead
of waiting for another writer's XAUTOCLAIM. SIGTERM/SIGINT stop it after the batch
in hand (committed and acknowledged, or left pending).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webapp.bus.writer_main", description=__doc__)
    parser.add_argument("--name", default=None, help="consumer name in the writers group (default: HOST-PID)")
    parser.add_argument(
        "--claim-idle", type=float, default=15.0, help="seconds before a dead writer's entry is claimed"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    import django

    django.setup()
    from django.conf import settings

    from webapp.bus.writer import Writer, default_name
    from webapp.serve import tune_gc

    if settings.NETTRAIL_REDIS_URL is None:
        print("nettrail writer: REDIS_URL is not set", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    tune_gc()
    Writer(name=args.name or default_name(), claim_idle_ms=int(args.claim_idle * 1000)).run(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
