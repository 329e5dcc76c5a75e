"""``nettrail serve --workers N --writers M`` and ``nettrail writer``: the scale-out deployment.

``serve`` needs REDIS_URL (the ingest stream) and DATABASE_URL (PostgreSQL: several
writers share it); it migrates, creates today's partitions and the writers' group,
then runs N web/ingest workers on one listening socket and M writer processes,
restarting any that exits (webapp/bus/cluster.py). As root the children run as the
``nettrail`` user, as under ``nettrail up``. It refuses a Redis that could lose a
batch already answered 200 (not ``appendfsync always``: webapp/bus/streams.py). ``writer`` runs one writer in the
foreground, for writers on other machines. No collector here: hosts ship to it.
Keep in sync with docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve", help="scale-out: N ingest/web workers and M writers (REDIS_URL, DATABASE_URL)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--workers", type=int, default=2, help="web/ingest worker processes (default 2)")
    parser.add_argument("--writers", type=int, default=2, help="writer processes (default 2)")
    parser.set_defaults(func=run_serve)
    writer = subparsers.add_parser("writer", help="scale-out: one writer process, Redis stream -> database")
    writer.add_argument("--name", default=None, help="consumer name (default HOST-PID; keep it across restarts)")
    writer.set_defaults(func=run_writer)


def run_serve(args: argparse.Namespace) -> int:
    problem = _check_environment(args.writers)
    if problem:
        print(f"nettrail serve: {problem}", file=sys.stderr)
        return 2
    if args.workers < 1 or args.writers < 1:
        print("nettrail serve: --workers and --writers must be at least 1", file=sys.stderr)
        return 2
    from nettrail.commands import up
    from webapp import datadir

    data = datadir.data_dir()
    datadir.ensure_data_dir(data)
    os.environ["NETTRAIL_DATA"] = str(data)
    account = up._ensure_user(up.WEBAPP_USER, data) if os.geteuid() == 0 else None
    env = up._child_env(data, account)
    python, popen = sys.executable, dict[str, Any](cwd=str(data))
    if account is not None:
        up._chown_tree(data, account)
        try:
            python = up.webapp_python(account)  # nettrail's own interpreter, or a clear refusal
        except up.WebappUnrunnable as exc:
            print(f"nettrail serve: {exc}", file=sys.stderr)
            return 1
        popen.update(user=account.pw_uid, group=account.pw_gid, extra_groups=[], umask=0o027)
    problem = _prepare() if account is None else _prepare_as_account(python, env, popen)
    if problem:
        print(f"nettrail serve: {problem}", file=sys.stderr)
        return 2

    from webapp.bus.cluster import Cluster

    cluster = Cluster(args.host, args.port, args.workers, args.writers, env, python=python, popen=popen)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    cluster.start()
    print(f"nettrail: serving http://{up._url_host(args.host)}:{args.port}/ with {args.workers} workers "
          f"and {args.writers} writers", flush=True)  # fmt: skip
    cluster.supervise(stop)
    print("nettrail: stopped", flush=True)
    return 0


def run_writer(args: argparse.Namespace) -> int:
    if not os.environ.get("REDIS_URL"):
        print("nettrail writer: REDIS_URL is not set", file=sys.stderr)
        return 2
    from webapp.bus import writer_main

    return writer_main.main(["--name", args.name] if args.name else [])


def _check_environment(writers: int) -> str | None:
    if not os.environ.get("REDIS_URL"):
        return "REDIS_URL is not set (the ingest stream); `nettrail up` is the one-process appliance"
    database = os.environ.get("DATABASE_URL", "")
    if not database.startswith(("postgres://", "postgresql://", "pgsql://")) and writers > 1:
        return "several writers need DATABASE_URL=postgres://... (SQLite has one writer at a time)"
    return None


def _prepare_as_account(python: str, env: dict[str, str], popen: dict[str, Any]) -> str | None:
    """_prepare() in a child run as the webapp's account, as `nettrail up` prepares its
    database: root opens no file of the data directory (a SQLite database there could be
    a symlink that account planted to one of root's)."""
    done = subprocess.run([python, "-m", "nettrail.commands.serve"], env=env, stderr=subprocess.PIPE, text=True,
                          check=False, **popen)  # fmt: skip
    if done.returncode == 0:
        return None
    return (
        done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"preparing failed (status {done.returncode})"
    )


def _prepare() -> str | None:
    """Migrate, create the partitions ahead and the writers' group, once, before any child starts.

    Returns why it cannot serve: a Redis that could lose batches already answered 200
    (not ``appendfsync always``) is refused before anything starts; the workers would
    answer every batch 503 (webapp/bus/streams.py).
    """
    from nettrail.commands._django import migrate, setup_django

    setup_django()
    from redis import RedisError

    from webapp.bus import streams

    try:
        streams.require_durable()
    except streams.NotDurable as exc:
        return str(exc)
    except RedisError as exc:
        return f"Redis at REDIS_URL unavailable: {exc}"
    migrate()
    from django.db import connections, transaction

    from webapp.traces import partitions

    with transaction.atomic():
        partitions.ensure_ahead()
    streams.ensure_group()
    print(f"nettrail: ingest stream {streams.STREAM}, durability: {streams.durability()}", flush=True)
    connections.close_all()
    return None


if __name__ == "__main__":  # `nettrail serve`'s preparation, run as the webapp's account
    problem = _prepare()
    if problem:
        print(problem, file=sys.stderr)
    sys.exit(1 if problem else 0)
