"""``nettrail up``: the embedded appliance -- webapp (unprivileged) plus, as root, the collector.

Steps, every start: create the data directory (NETTRAIL_DATA, see
webapp/datadir.py; as root without following any symlink, nettrail/commands/up_dirs.py),
migrate, create the admin user on first run (password from
NETTRAIL_ADMIN_PASSWORD or generated and printed once, never logged), make a fresh
token for the local host (revoking the previous one) -- as root, these run in a child
switched to the ``nettrail`` system user (created if missing, owner of the data
directory; nettrail/commands/up_prepare.py) -- start daphne via
``python -m webapp.serve`` (as that user too, also on the Unix socket
``webapp.sock`` in the data directory), then, as root and
when the ``collect`` command exists, ``nettrail collect --server unix:SOCKET
--server-user nettrail --spool D/spool --token-file F --alerts --ppl 8 --providers tcp,siftr-poll,skb,udp-calls,skb-lifecycle --skb-sample 64
--skb-stages ends --skb-window 0.2/2`` (no program on any packet's path: SIFTR samples by
polling each socket, sampled buffer lifecycles in windows: one buffer in 64
followed while a window is open, 0.2 s of every 2 s; $NETTRAIL_SKB_SAMPLE=N follows one in N
instead, 1 every buffer, 0 none; $NETTRAIL_SKB_WINDOW=OPEN/EVERY other windows, 0 none (the
hooks attached all the time); each followed buffer's first sighting, copy and end, and
$NETTRAIL_SKB_STAGES=all adds its receive entry and transmit stages; $NETTRAIL_PROVIDERS
chooses the whole provider set, e.g. tcp,siftr,skb,ip-flows,udp for a program on every packet;
--providers-from-server: staff may change the set from the dashboard's Status page, and the
collector follows it) as a root child (D: the collector's own directory, root's alone,
/var/lib/nettrail-collector or $NETTRAIL_COLLECTOR_DIR; F: ``collector.token`` in it, mode 0600;
a token on the command line would be visible to every local user in ``ps``). The collector
checks the socket's holder runs as ``nettrail`` before sending (collector/sinks/unix_peer.py):
a user who took the TCP port while the webapp was down gets nothing. Ctrl-C / SIGTERM stop both:
the collector first (it drains its ring buffer and ships its last batches while the
webapp still takes them), then the webapp.

The webapp child runs on this interpreter (``sys.executable``) and its packages, never on
another Python: when the ``nettrail`` user cannot reach it (a venv under /root, a pyenv
Python in a private home), ``nettrail up`` refuses, naming the private directory and the
fix (install under /opt, or ``chmod o+rx`` that directory). Then a probe, run as that
user with the webapp's settings, imports everything the configured channel layer and
database need before daphne starts: a missing package is reported with its name and
the fix, never as "port in use?". Keep in sync with docs/webapp.md, README.md.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import pwd
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collector.private_dir import UnsafeDirectoryError
from collector.sinks.token_source import write_token_file
from nettrail.commands import up_dirs, up_prepare
from nettrail.commands.up_dirs import FIX as FIX  # re-exported: tests and `nettrail serve` use them here
from nettrail.commands.up_dirs import FIX_PRIVATE as FIX_PRIVATE
from nettrail.commands.up_dirs import WebappUnrunnable as WebappUnrunnable
from nettrail.commands.up_dirs import webapp_python as webapp_python
from nettrail.commands.up_dirs import world_traversable as _world_traversable
from translators.skb_window import ALWAYS, parse_window
from translators.tracing_request import PROVIDER_NAMES

WEBAPP_USER = "nettrail"
_ensure_user = up_dirs.ensure_user  # `nettrail serve` and the tests call it here
LOCAL_TOKEN_LABEL = "nettrail up: local collector"
ADMIN_USER = "admin"
START_TIMEOUT = 60.0  # seconds for daphne to listen (first start compiles nothing, but CI is slow)
SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout the webapp child imports from
STOP_TIMEOUT = 10.0  # seconds the webapp gets after SIGTERM before SIGKILL
COLLECTOR_STOP_TIMEOUT = 60.0  # the collector drains its ring and spool to the webapp first
PROBE_TIMEOUT = 60.0
# Run by the webapp's interpreter as the webapp user: every import daphne will need, with
# the real settings, so the channel layer's and database's packages are checked too.
PROBE = """
import django, daphne.server
django.setup()
from django.conf import settings
from django.db import connection
from channels.layers import get_channel_layer
import webapp.asgi, webapp.serve
get_channel_layer()
backend = settings.CHANNEL_LAYERS["default"]["BACKEND"]
if "redis" in backend:
    import channels_redis.core, redis.asyncio
connection.ensure_connection()
"""
TOKEN_FILE = up_dirs.TOKEN_FILE  # in the collector's directory: the local token for the collector child
# One siftr sample per 8 packets of a flow: a busy host's bulk flows would otherwise fill
# the ring buffer faster than one core decodes it and lose events (docs/benchmarks.md);
# the exact per-flow counters stay exact whatever the sampling (docs/collector.md).
COLLECTOR_PPL = 8
# The always-on set: no program on any packet's path. TCP states, retransmissions, resets
# and congestion states (tcp), each socket's control block polled every 0.1 s for SIFTR
# samples (siftr-poll: cwnd, srtt, windows, the exact per-flow counts; rules K1, K6, K7,
# K13 and the time-sequence graph), drops with their reasons (skb), the UDP page from the
# send and receive calls (udp-calls), and buffer lifecycles in windows: the kernel follows
# one buffer in COLLECTOR_SKB_SAMPLE while a window is open, 0.2 s of every 2 s
# (skb-lifecycle --skb-sample N --skb-window COLLECTOR_SKB_WINDOW: the Buffers page and
# each connection's page, beside exact counts of the buffers seen and the windows' open
# time). Measured within the 3% always-on budget of CPU per byte of bulk loopback TCP
# (docs/benchmarks.md, "SIFTR by polling"). Every per-packet tracepoint costs about 1.2%
# in dispatch alone, so the former default, PER_PACKET_PROVIDERS (siftr's sample at
# packets, --ppl 8, for SIFTR logs; ip-flows' per-flow IP counters; the device's UDP view),
# costs about 1.10 (docs/benchmarks.md, "Buffer lifecycles in windows"): a choice, not the
# default. NETTRAIL_SKB_WINDOW=OPEN/EVERY chooses other windows, 0 none (lifecycles all
# the time).
# NETTRAIL_PROVIDERS=a,b,... chooses the whole set instead (skb-lifecycle in it is sampled
# as below). NETTRAIL_SKB_SAMPLE=N chooses another N (1: every buffer, the full tracing
# switch), 0 turns lifecycles off. Sampled, only the stages a followed buffer cannot lose
# are recorded (--skb-stages ends: first sighting, copy to its reader, end): the other
# stage hooks (receive entry, transmit start and done) fire for every buffer, followed or
# not; NETTRAIL_SKB_STAGES=all records them too (the default with N = 1).
COLLECTOR_PROVIDERS = "tcp,siftr-poll,skb,udp-calls"  # without lifecycles (NETTRAIL_SKB_SAMPLE=0)
PER_PACKET_PROVIDERS = "tcp,siftr,skb,ip-flows,udp"  # the former default: a program on every packet
COLLECTOR_SKB_SAMPLE = 64  # the default N, followed inside the windows
COLLECTOR_SKB_WINDOW = "0.2/2"  # OPEN/EVERY seconds
PROVIDERS_ENV = "NETTRAIL_PROVIDERS"
SKB_SAMPLE_ENV = "NETTRAIL_SKB_SAMPLE"
SKB_STAGES_ENV = "NETTRAIL_SKB_STAGES"
SKB_WINDOW_ENV = "NETTRAIL_SKB_WINDOW"
KNOWN_PROVIDERS = PROVIDER_NAMES
# collector/bpf/loader.py's SKB_STAGES (not imported: up runs without the collector)
SKB_STAGES = ("all", "ends")


def chosen_providers(env: dict[str, str]) -> tuple[list[str], bool]:
    """$NETTRAIL_PROVIDERS as (providers without skb-lifecycle, whether it was listed);
    unset or invalid: the always-on set with lifecycles (an invalid one is said)."""
    said = env.get(PROVIDERS_ENV, "").strip()
    default = COLLECTOR_PROVIDERS.split(",")
    if not said:
        return default, True
    names = [p.strip() for p in said.split(",") if p.strip()]
    unknown = [p for p in names if p not in KNOWN_PROVIDERS]
    if unknown or not names:
        print(f"nettrail up: ${PROVIDERS_ENV} takes providers from {', '.join(KNOWN_PROVIDERS)}, got "
              f"{said!r}: running the default set", file=sys.stderr, flush=True)  # fmt: skip
        return default, True
    return list(dict.fromkeys(p for p in names if p != "skb-lifecycle")), "skb-lifecycle" in names


def collector_providers(env: dict[str, str]) -> list[str]:
    """`nettrail collect`'s provider arguments: $NETTRAIL_PROVIDERS or the always-on set,
    with sampled buffer lifecycles, one buffer in $NETTRAIL_SKB_SAMPLE (default
    COLLECTOR_SKB_SAMPLE; 0: none), recording the stages $NETTRAIL_SKB_STAGES names
    (default: ends when sampled, all with N = 1), in the windows $NETTRAIL_SKB_WINDOW
    names (default COLLECTOR_SKB_WINDOW; 0: all the time)."""
    providers, lifecycles = chosen_providers(env)
    value = env.get(SKB_SAMPLE_ENV, "").strip()
    n = COLLECTOR_SKB_SAMPLE
    if value.isdigit():
        n = int(value)
    elif value:  # said, and tracing goes on with the default
        print(f"nettrail up: ${SKB_SAMPLE_ENV} must be 0 (no lifecycles) or N (follow one buffer in N), "
              f"got {value!r}: following one buffer in {n}", file=sys.stderr, flush=True)  # fmt: skip
    if n == 0 or not lifecycles:
        return ["--providers", ",".join(providers)]
    stages = "ends" if n > 1 else "all"
    said = env.get(SKB_STAGES_ENV, "").strip()
    if said in SKB_STAGES:
        stages = said
    elif said:  # said, and tracing goes on with the default
        print(f"nettrail up: ${SKB_STAGES_ENV} must be all or ends, got {said!r}: recording {stages}",
              file=sys.stderr, flush=True)  # fmt: skip
    args = ["--providers", ",".join([*providers, "skb-lifecycle"]), "--skb-sample", str(n), "--skb-stages", stages]
    window = env.get(SKB_WINDOW_ENV, "").strip() or COLLECTOR_SKB_WINDOW
    if window == ALWAYS:
        return args
    try:
        parse_window(window)
    except ValueError as exc:  # said, and tracing goes on with the default
        print(f"nettrail up: ${SKB_WINDOW_ENV} must be 0 (no windows) or OPEN/EVERY: {exc}; "
              f"windows of {COLLECTOR_SKB_WINDOW} s", file=sys.stderr, flush=True)  # fmt: skip
        window = COLLECTOR_SKB_WINDOW
    return [*args, "--skb-window", window]


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("up", help="start the webapp (and, as root, the local collector)")
    parser.add_argument("--port", type=int, default=8000, help="webapp port (default 8000)")
    parser.add_argument("--host", default="127.0.0.1", help="webapp listen address (default 127.0.0.1)")
    parser.add_argument("--no-collect", action="store_true", help="start the webapp only, even as root")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from webapp import datadir

    data = datadir.data_dir()
    root = os.geteuid() == 0
    if root and not _world_traversable(SOURCE_ROOT):
        print(f"nettrail up: the {WEBAPP_USER} user cannot read the nettrail code in {SOURCE_ROOT} "
              "(a parent directory is private); install nettrail in a readable place", file=sys.stderr)  # fmt: skip
        return 1
    if root and not _world_traversable(data.parent):
        print(f"nettrail up: the {WEBAPP_USER} user cannot reach {data} (a parent directory is private); "
              "set NETTRAIL_DATA to a directory outside private ones, e.g. /var/lib/nettrail", file=sys.stderr)  # fmt: skip
        return 1
    os.environ["NETTRAIL_DATA"] = str(data)
    account = _ensure_user(WEBAPP_USER, data) if root else None
    try:
        mine, sock = _prepare_dirs(data, account)
        python = sys.executable if account is None else webapp_python(account)
        password, token = _prepare_as(python, data, account)
    except (UnsafeDirectoryError, ValueError, WebappUnrunnable) as exc:
        print(f"nettrail up: {exc}", file=sys.stderr)
        return 1
    if password is not None:  # printed now, so a webapp that fails to start cannot lose it
        print(f"nettrail: created user {ADMIN_USER!r} with password {password} (shown once)", flush=True)
    url = f"http://{_url_host(args.host)}:{args.port}/"
    try:
        web = _start_webapp(args, data, account, python, sock)
    except WebappUnrunnable as exc:
        print(f"nettrail up: {exc}", file=sys.stderr)
        return 1
    if not _wait_listening(args.host, args.port, web):
        _stop([web])
        print(f"nettrail up: the webapp did not start on {args.host}:{args.port}: {_why_not_started(args, web)}",
              file=sys.stderr)  # fmt: skip
        return 1
    print(f"nettrail: webapp running at {url}", flush=True)
    children = [web]
    if not root:
        print(
            "nettrail: live kernel tracing needs root; started the webapp only (captures can still be analysed and uploaded)"
        )
    elif not args.no_collect and _collector_available() and mine is not None and sock is not None:
        children.append(_start_collector(sock, token, mine))
    try:
        return _supervise(children)
    finally:
        if mine is not None:
            (mine / TOKEN_FILE).unlink(missing_ok=True)  # revoked at the next start anyway


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _prepare_dirs(data: Path, account: pwd.struct_passwd | None) -> tuple[Path | None, Path | None]:
    """The data directory, made or checked; as root also the collector's own directory and
    the webapp's socket path: (collector's directory, socket), or (None, None) for a user."""
    if account is None:
        from webapp import datadir

        datadir.ensure_data_dir(data)
        return None, None
    up_dirs.prepare_data_dir(data, account)
    return up_dirs.prepare_collector_dir(data), up_dirs.socket_path(data)


def _prepare_as(python: str, data: Path, account: pwd.struct_passwd | None) -> tuple[str | None, str]:
    """prepare_database(), here for a user; as root in a child run as `account` (root opens
    no file of the data directory), probed first. Returns (new password, token)."""
    if account is None:
        return prepare_database()
    env, drop = _child_env(data, account), _drop(account)
    _probe(python, env, data, drop, account)
    given = {k: v for k, v in os.environ.items() if k == "NETTRAIL_ADMIN_PASSWORD"}  # this child alone takes it
    done = subprocess.run(
        [python, "-m", "nettrail.commands.up_prepare"], env={**env, **given}, cwd=str(data), stdout=subprocess.PIPE,
        text=True, check=False, **drop,
    )  # fmt: skip
    answers = [line for line in done.stdout.splitlines() if line.startswith(up_prepare.MARK)]
    if done.returncode != 0 or not answers:
        raise WebappUnrunnable(f"preparing the database as {account.pw_name} failed (status {done.returncode}; "
                               "its error is above)")  # fmt: skip
    answer = json.loads(answers[-1][len(up_prepare.MARK) :])
    return answer["password"], str(answer["token"])


def _chown_tree(data: Path, account: pwd.struct_passwd) -> None:
    """`nettrail serve`'s way in: the data directory to `account`, no symlink followed (up_dirs)."""
    up_dirs.prepare_data_dir(data, account)


def _drop(account: pwd.struct_passwd) -> dict[str, Any]:
    return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": [], "umask": 0o027}


def prepare_database() -> tuple[str | None, str]:
    """Migrate, create the admin on first run, renew the local token; returns (new password, token)."""
    from nettrail.commands._django import migrate, setup_django

    setup_django()
    migrate()
    from django.db import connections

    password = _ensure_admin()
    token = _renew_local_token()
    connections.close_all()  # the last close checkpoints the WAL, so no root-owned -wal file stays
    return password, token


def _ensure_admin() -> str | None:
    from django.contrib.auth import get_user_model

    users = get_user_model()
    if users.objects.filter(is_superuser=True).exists():
        return None
    given = os.environ.get("NETTRAIL_ADMIN_PASSWORD")
    password = given or secrets.token_urlsafe(12)
    users.objects.create_superuser(ADMIN_USER, email="", password=password)
    return None if given else password


def _renew_local_token() -> str:
    from webapp.traces.models import IngestToken
    from webapp.traces.tokens import create_token

    host = os.environ.get("NETTRAIL_HOST_ID") or socket.gethostname()
    IngestToken.objects.filter(host__name=host, label=LOCAL_TOKEN_LABEL).delete()
    _, raw = create_token(host, label=LOCAL_TOKEN_LABEL)
    return raw


def _child_env(data: Path, account: pwd.struct_passwd | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NETTRAIL_ADMIN_PASSWORD"}
    env["NETTRAIL_DATA"] = str(data)
    if account is not None:
        env.update(HOME=str(data), USER=account.pw_name, LOGNAME=account.pw_name)
    return env


PR_SET_PDEATHSIG = 1  # prctl(2)


def _stop_when_up_dies(parent: int) -> Callable[[], None]:
    """A child's preexec_fn: SIGTERM to the child when `nettrail up` dies, however it dies
    (a SIGKILL included), so that no collector goes on tracing, nor a webapp serving, with
    nobody to stop it. Set in the child after its user change (which would clear it), and
    checked against a parent that died before it was set."""

    def child() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return child


def _start_webapp(
    args: argparse.Namespace, data: Path, account: pwd.struct_passwd | None, python: str, sock: Path | None
) -> subprocess.Popen[bytes]:
    env = _child_env(data, account)
    if "ALLOWED_HOSTS" not in env and args.host not in ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::"):
        # Listening on a specific address: requests naming it must be accepted too.
        env["ALLOWED_HOSTS"] = f"127.0.0.1,localhost,[::1],{_url_host(args.host)}"
    drop: dict[str, Any] = {}
    if account is None:
        _probe(python, env, data, drop, account)  # as root: probed before the database step
    else:
        drop = _drop(account)
    command = [python, "-m", "webapp.serve", "--host", args.host, "--port", str(args.port)]
    if sock is not None:  # the local collector's way in (collector/sinks/unix_peer.py)
        command += ["--unix", str(sock)]
    # stderr stays the terminal's: a webapp that dies at start says why there.
    # Its own session: a Ctrl-C in the terminal reaches only `nettrail up`, which then
    # stops the collector before the webapp.
    return subprocess.Popen(
        command, env=env, cwd=str(data), start_new_session=True, preexec_fn=_stop_when_up_dies(os.getpid()), **drop
    )


def _probe(
    python: str, env: dict[str, str], data: Path, drop: dict[str, Any], account: pwd.struct_passwd | None
) -> None:
    """Import what the webapp needs, as its user, with its settings; WebappUnrunnable says what failed."""
    probe_env = {**env, "DJANGO_SETTINGS_MODULE": "webapp.settings"}
    try:
        done = subprocess.run(
            [python, "-c", PROBE], env=probe_env, cwd=str(data), capture_output=True, text=True,
            timeout=PROBE_TIMEOUT, **drop,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        done = subprocess.CompletedProcess([python], 1, "", str(exc))
    if done.returncode == 0:
        return
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    last = lines[-1] if lines else f"exit status {done.returncode}"
    who = f"the {account.pw_name} user" if account is not None else "this user"
    setting = "" if "CHANNEL_LAYER" not in env else f" (CHANNEL_LAYER={env['CHANNEL_LAYER']})"
    fix = (
        FIX.format(user=account.pw_name)
        if account is not None
        else "install nettrail's dependencies: pip install nettrail"
    )
    raise WebappUnrunnable(f"the webapp cannot run on {python} as {who}{setting}: {last}; {fix}")


def _why_not_started(args: argparse.Namespace, web: subprocess.Popen[bytes]) -> str:
    """Why the webapp is not listening: its exit status, or a port taken by someone else."""
    if web.returncode is not None and web.returncode != 0:
        return f"it exited with status {web.returncode} (its error is above)"
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    with socket.socket(family) as probe:
        try:
            probe.bind((args.host, args.port))
        except OSError as exc:
            return f"cannot listen there ({exc.strerror}): port {args.port} in use?"
    return f"it did not listen within {START_TIMEOUT:.0f} s"


def _collector_available() -> bool:
    from nettrail.cli import COMMANDS

    return "collect" in COMMANDS and importlib.util.find_spec("nettrail.commands.collect") is not None


def collector_arguments(sock: Path, mine: Path) -> list[str]:
    """`nettrail collect`'s arguments for the local collector (after `collect`)."""
    return [
        # the webapp's socket, its holder checked to be the webapp's account before the token goes
        *("--server", f"unix:{sock}", "--server-user", WEBAPP_USER),
        *("--token-file", str(mine / TOKEN_FILE), "--spool", str(mine / up_dirs.SPOOL_DIR)),
        *("--alerts", "--ppl", str(COLLECTOR_PPL)),  # alerts reach the dashboard live
        "--providers-from-server",  # staff may change the set from the Status page (below: until they do)
        *collector_providers(dict(os.environ)),
    ]


def _start_collector(sock: Path, token: str, mine: Path) -> subprocess.Popen[bytes]:
    # root's, 0600, in root's directory: neither ps nor the webapp user reads it
    write_token_file(mine / TOKEN_FILE, token)
    command = [sys.executable, "-m", "nettrail.cli", "collect", *collector_arguments(sock, mine)]
    print("nettrail: collector started (live kernel tracing)", flush=True)
    env = {k: v for k, v in os.environ.items() if k != "NETTRAIL_ADMIN_PASSWORD"}
    # stopped by us, first; by the kernel's SIGTERM if we die without stopping it
    return subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=_stop_when_up_dies(os.getpid()))


def _wait_listening(host: str, port: int, child: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline and child.poll() is None:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def _supervise(children: list[subprocess.Popen[bytes]]) -> int:
    """Wait for Ctrl-C/SIGTERM (then stop everything) or for the webapp to die."""
    stopping: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stopping.append(signum))
    web, *others = children
    while not stopping:
        if web.poll() is not None:
            print(f"nettrail up: the webapp exited with status {web.returncode}", file=sys.stderr)
            _stop(others)
            return 1
        for child in others:
            if child.poll() is not None and child.returncode is not None:
                print(
                    f"nettrail up: the collector exited with status {child.returncode}; the webapp keeps running",
                    file=sys.stderr,
                )
                others.remove(child)
        time.sleep(0.2)
    print("nettrail: stopping", flush=True)
    # The collector first: it detaches, drains what the kernel still holds and ships its
    # last batches (and spool) while the webapp still takes them; then the webapp.
    _stop(others, COLLECTOR_STOP_TIMEOUT)
    _stop([web])
    return 0


def _stop(children: list[subprocess.Popen[bytes]], timeout: float = STOP_TIMEOUT) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
