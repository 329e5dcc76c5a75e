"""Runs the webapp: daphne serving webapp.asgi, plus the retention trimmer thread.

``python -m webapp.serve --host 127.0.0.1 --port 8000``; started by ``nettrail up``
(as the unprivileged user), or with ``--fd N`` by ``nettrail serve``, whose workers
all accept on one inherited socket. SIGINT/SIGTERM stop daphne cleanly (Twisted's handlers).
With ``--unix PATH`` it also listens on a Unix socket (mode 0600, in the data directory
only its own account can enter): ``nettrail up``'s root collector ships there and checks
with SO_PEERCRED that this process's account holds it (collector/sinks/unix_peer.py).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m webapp.serve", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument(
        "--fd",
        type=int,
        default=None,
        help="serve a listening socket inherited as this descriptor (webapp/bus/cluster.py)",
    )
    parser.add_argument(
        "--unix", metavar="PATH", default=None, help="also listen on a Unix socket at PATH (the local collector's)"
    )
    args = parser.parse_args(argv)
    if os.geteuid() == 0:
        print("nettrail: the webapp must not run as root (use `nettrail up`, which drops privileges)", file=sys.stderr)
        return 1
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    # The dashboard tells its own sockets from the traffic it shows (webapp/dashboard/own_traffic.py).
    # A worker on an inherited socket (--fd) keeps the address its cluster exports: its own
    # --host/--port are only the defaults then.
    if args.fd is None or "NETTRAIL_WEBAPP_LISTEN" not in os.environ:
        os.environ["NETTRAIL_WEBAPP_LISTEN"] = f"{args.host}:{args.port}"

    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server
    from django.conf import settings

    from webapp import daphne_gate
    from webapp.asgi import application
    from webapp.traces.checkpoint import start_checkpointer
    from webapp.traces.retention import start_trimmer

    if settings.NETTRAIL_TRIM_INTERVAL:
        start_trimmer(settings.NETTRAIL_TRIM_INTERVAL)
    database = settings.DATABASES["default"]
    if settings.NETTRAIL_CHECKPOINT_INTERVAL and database["ENGINE"] == "django.db.backends.sqlite3":
        start_checkpointer(settings.NETTRAIL_CHECKPOINT_INTERVAL, str(database["NAME"]))
    tune_gc()
    daphne_gate.install()  # refuse early: before Twisted reads a body (webapp/daphne_gate.py)
    endpoints = build_endpoint_description_strings(
        **({"file_descriptor": args.fd} if args.fd is not None else {"host": args.host, "port": args.port})
    )
    if args.unix:
        endpoints.append(unix_endpoint(args.unix))
    Server(application=application, endpoints=endpoints, signal_handlers=True).run()
    return 0


def unix_endpoint(path: str) -> str:
    """Twisted's description of a Unix socket at `path`, 0600; its lock file (PATH.lock)
    lets a new start replace the socket a killed one left."""
    quoted = path.replace("\\", "\\\\").replace(":", "\\:")  # twisted's quoteStringArgument
    return f"unix:{quoted}:mode=600:lockfile=1"


def tune_gc() -> None:
    """Cycle-collector settings for a server that allocates ~100,000 objects a request.

    Everything loaded so far lives as long as the process: frozen, the collector's full
    passes stop walking it again and again during ingest. A young generation of 50,000
    objects instead of 700 lets a batch's short-lived rows and lists die before a
    collection instead of being traversed and promoted. bench/bench_ingest.py does the same.
    """
    gc.freeze()
    gc.set_threshold(50_000, 10, 10)


if __name__ == "__main__":
    sys.exit(main())
