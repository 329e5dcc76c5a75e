"""``nettrail collect``: live kernel tracing with the tcp, siftr and tcpdebug providers.

Loads kmod/nettrail.bpf.o (building it if needed), streams records to stdout (xo
styles), to a file (--out FILE.jsonl|.msgpack, or - for JSON lines on stdout) or to
the webapp (--server URL --token T, through collector/sinks/http.py), until
--duration ends or SIGINT/SIGTERM arrives; then drains the ring, detaches every
program and prints the loss totals on stderr. Without the privileges or kernel
support it needs it prints one line saying what is missing and exits 1.
The output contract is docs/collector.md; keep it in sync.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from analysis.alerts import live
from analysis.alerts.config import ConfigError
from collector import identity
from collector.bpf import layout, loader, variants
from collector.bpf.build import BuildError
from collector.bpf.kallsyms import kernel_symbols
from collector.bpf.keeper import RingKeeper
from collector.bpf.loader import BpfError, Filters, KernelSession, Options
from collector.bpf.source import KernelSource, wall_offset
from collector.bpf.swap import COMMAND_LINE, Swap
from collector.health import coverage
from collector.health.overhead import DEFAULT_INTERVAL_S
from collector.health.reporter import SelfHealth
from collector.listen_queues import Listener, filter_for
from collector.private_dir import collector_dir
from collector.sinks.http_transport import add_transport_arguments, transport_options
from collector.sinks.token_source import add_token_arguments, resolve_token
from collector.stack_counters import StackCounters
from translators.kernel import KernelEnv, KernelRecord
from translators.skb_window import parse_window
from xo import add_libxo_argument, libxo_from_args

DEFAULT_PROVIDERS = "tcp,siftr"
BTF_PATH = Path("/sys/kernel/btf/vmlinux")
PROG = "nettrail collect"


class Sink(Protocol):
    def write(self, records: list[KernelRecord]) -> None: ...
    def close(self) -> None: ...


def listen_filter(filters: Filters) -> Callable[[Listener], bool]:
    """The listeners whose queue the stack counters record: those the filters let through."""
    addr = str(filters.addr) if filters.addr is not None else None
    return filter_for(filters.port, addr, owner_filtered=bool(filters.pid or filters.cgroup))


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("collect", help="trace TCP live in the kernel (eBPF): tcp, siftr, tcpdebug providers")
    p.add_argument(
        "--providers",
        default=DEFAULT_PROVIDERS,
        help=f"comma-separated providers: {', '.join(loader.PROVIDERS)} (default {DEFAULT_PROVIDERS})",
    )
    p.add_argument("--ppl", type=int, default=1, help="siftr: one sample per N packets of each flow (default 1)")
    p.add_argument("--duration", type=float, default=None, help="stop after S seconds (default: until SIGINT/SIGTERM)")
    p.add_argument(
        "--filter",
        default="",
        help="in-kernel filters, comma-separated: pid=N (process), port=N (local or remote), addr=IP, "
        "cgroup=ID (cgroup v2 id), netns=INODE",
    )
    add_libxo_argument(p)
    p.add_argument("--zeek", action="store_true", help="write connection summaries as Zeek's conn.log on stdout")
    p.add_argument("--out", default=None, help="write records to FILE.jsonl or FILE.msgpack (- = JSON lines on stdout)")
    p.add_argument("--server", default=None, help="ship records to the webapp at URL (needs a token)")
    add_token_arguments(p, "the host's ingest token for --server")
    add_transport_arguments(p)
    p.add_argument(
        "--spool",
        default=None,
        help="spool directory for --server (default: as root /var/lib/nettrail-collector/spool, else $NETTRAIL_DATA/spool)",
    )
    p.add_argument(
        "--providers-from-server",
        action="store_true",
        help="with --server: trace what the dashboard asks for this host (Status page, staff only), swapping the "
        "kernel programs when it changes; --providers, --skb-sample and --skb-stages are the set until it asks "
        "and when it asks for nothing",
    )
    p.add_argument(
        "--ringbuf-size", type=int, default=loader.DEFAULT_RINGBUF_BYTES, help="ring buffer bytes (power of 2)"
    )
    p.add_argument(
        "--flow-interval",
        type=float,
        default=1.0,
        help="siftr/udp/skb/ip-flows: seconds between FlowCounters, DropCount and IpFlowCounters reports",
    )
    p.add_argument(
        "--drop-rate",
        type=int,
        default=0,
        help="skb: drop events per second per CPU (default 0 = all; counts stay exact)",
    )
    p.add_argument(
        "--ip-sample",
        type=int,
        default=0,
        help="ip-flows: an ip_packet record for 1 packet in N of each flow (default 0 = exact counters only)",
    )
    p.add_argument(
        "--skb-sample",
        type=int,
        default=1,
        help="skb-lifecycle: follow 1 buffer in N from its first sighting to its end, chosen in the kernel "
        "(default 1 = every buffer; the counts of buffers seen stay exact: sampling_report)",
    )
    p.add_argument(
        "--skb-stages",
        choices=loader.SKB_STAGES,
        default=None,
        help="skb-lifecycle: the stages recorded. all: every stage (receive entry hooks, transmit start and "
        "done too); ends: a followed buffer's first sighting, copy to its reader and end only, the other "
        "stage hooks not attached (they run for every buffer). Default: ends with --skb-sample N > 1, "
        "all with --skb-sample 1",
    )
    p.add_argument(
        "--skb-window",
        default=None,
        metavar="OPEN/EVERY",
        help="skb-lifecycle: attach its per-buffer hooks for OPEN seconds of every EVERY (e.g. 0.25/5), "
        "so that lifecycles cost a share of their always-on price; the buffers seen in the windows are "
        "counted exactly and the windows' open time is reported beside them (default: always attached)",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=loader.DEFAULT_POLL_INTERVAL_S,
        metavar="S",
        help="siftr-poll: seconds between samples of each followed socket's control block (taken when "
        f"something in it moved or data waits; default {loader.DEFAULT_POLL_INTERVAL_S:g})",
    )
    p.add_argument(
        "--tcp-fold",
        action="store_true",
        help="tcp: fold each socket's state and congestion-state changes and its final counters (siftr's "
        "flow counters too) into one tcp_lifecycle record per socket end, kept in the kernel until the "
        "socket ends or is older than --fold-window (then flushed, partial, and streamed as without it); "
        "needs Linux 5.11 (default off: a record per change)",
    )
    p.add_argument(
        "--fold-window",
        type=float,
        default=loader.DEFAULT_FOLD_WINDOW_S,
        metavar="S",
        help=f"--tcp-fold: seconds a socket stays folded before it is flushed, by siftr-poll's poll or, without "
        f"siftr-poll, by the same iterator run every {loader.FOLD_POLL_S:g} s (default {loader.DEFAULT_FOLD_WINDOW_S:g})",
    )
    p.add_argument(
        "--ip-flows-max",
        type=int,
        default=loader.DEFAULT_IP_FLOWS_MAX,
        help=f"ip-flows: flow entries kept in the kernel (LRU; evictions are reported as loss; "
        f"default {loader.DEFAULT_IP_FLOWS_MAX})",
    )
    p.add_argument(
        "--alerts", action="store_true", help="run the alert rules over the records and emit alert records too"
    )
    p.add_argument("--rules", default=None, help="with --alerts: rules TOML file (default $NETTRAIL_RULES or none)")
    p.add_argument(
        "--stats-interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        help=f"seconds between collector_stats records (the collector's own CPU %% and events/s; "
        f"default {DEFAULT_INTERVAL_S:g})",
    )
    p.add_argument(
        "--no-stack-counters",
        action="store_true",
        help="do not report moves of the TCP MIB counters (/proc/PID/net/netstat and snmp of every network namespace) as stack_counter records",
    )
    p.set_defaults(func=run)


def fail(message: str, status: int = 1) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return status


def parse_options(args: argparse.Namespace) -> Options:
    """Options from the command line; ValueError says which argument is wrong."""
    providers = tuple(p.strip() for p in args.providers.split(",") if p.strip())
    unknown = [p for p in providers if p not in loader.PROVIDERS]
    if unknown or not providers:
        raise ValueError(
            f"--providers: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(loader.PROVIDERS)}"
        )
    if args.ppl < 1:
        raise ValueError("--ppl must be at least 1")
    if args.ip_sample < 0:
        raise ValueError("--ip-sample must be 0 (counters only) or a positive N")
    if args.skb_sample < 1:
        raise ValueError("--skb-sample must be at least 1 (1 = every buffer)")
    if not 1 <= args.ip_flows_max <= 1 << 20:
        raise ValueError("--ip-flows-max must be between 1 and 1048576")
    size = args.ringbuf_size
    if size < 4096 or size & (size - 1):
        raise ValueError("--ringbuf-size must be a power of 2 of at least 4096")
    if getattr(args, "providers_from_server", False) and not args.server:
        raise ValueError("--providers-from-server needs --server (the dashboard's request comes with its answers)")
    if args.duration is not None and args.duration <= 0:
        raise ValueError("--duration must be positive")
    if not args.stats_interval > 0:
        raise ValueError("--stats-interval must be positive")
    if not loader.MIN_POLL_INTERVAL_S <= args.poll_interval <= loader.MAX_POLL_INTERVAL_S:
        raise ValueError(
            f"--poll-interval must be between {loader.MIN_POLL_INTERVAL_S:g} and {loader.MAX_POLL_INTERVAL_S:g} seconds"
        )
    if not loader.MIN_FOLD_WINDOW_S <= args.fold_window <= loader.MAX_FOLD_WINDOW_S:
        raise ValueError(
            f"--fold-window must be between {loader.MIN_FOLD_WINDOW_S:g} and {loader.MAX_FOLD_WINDOW_S:g} seconds"
        )
    return Options(
        providers=providers,
        ppl=args.ppl,
        filters=loader.parse_filters(args.filter),
        ringbuf_bytes=size,
        exclude_pid=os.getpid(),
        drop_rate=max(0, args.drop_rate),
        ip_sample=args.ip_sample,
        ip_flows_max=args.ip_flows_max,
        skb_sample=args.skb_sample,
        skb_stages=args.skb_stages,
        skb_window=parse_window(args.skb_window) if args.skb_window else None,
        poll_interval_s=args.poll_interval,
        tcp_fold=args.tcp_fold,
        fold_window_s=args.fold_window,
    )


def default_spool() -> Path:
    """As root the collector's own directory's spool (root's alone, never the webapp's
    data directory: collector/private_dir.py), else $NETTRAIL_DATA/spool or
    ~/.local/share/nettrail/spool."""
    if os.geteuid() == 0:
        return collector_dir() / "spool"
    data = os.environ.get("NETTRAIL_DATA")
    return (Path(data) if data else Path.home() / ".local/share/nettrail") / "spool"


def open_sink(args: argparse.Namespace) -> Sink:
    """The sink the arguments ask for; ValueError/OSError/ImportError say why not."""
    chosen = [name for name in ("out", "server", "zeek") if getattr(args, name, None)] + (
        ["libxo"] if args.libxo else []
    )
    if len(chosen) > 1:
        raise ValueError(
            f"choose one of --libxo, --zeek, --out and --server (got {', '.join('--' + c for c in chosen)})"
        )
    if args.server:
        token = resolve_token(args)
        if not token:
            raise ValueError("--server needs --token, --token-file or $NETTRAIL_TOKEN (the host's ingest token)")
        try:
            from collector.sinks.http import HttpSink
        except ImportError as exc:
            raise ImportError(f"--server: the HTTP sink is not available ({exc})") from None
        return HttpSink(args.server, token, args.spool or default_spool(), **transport_options(args))
    if getattr(args, "zeek", False):
        from collector.sinks.zeek import ZeekSink

        return ZeekSink()
    if args.out:
        from collector.sinks.file import FileSink

        return FileSink(args.out)
    from collector.sinks.stdout import StdoutSink

    return StdoutSink(libxo_from_args(args))


class StopFlag:
    """Set by SIGINT/SIGTERM: the loop finishes its batch, drains and detaches."""

    def __init__(self) -> None:
        self.stopped = False
        self.previous = {s: signal.signal(s, self.stop) for s in (signal.SIGINT, signal.SIGTERM)}

    def stop(self, signum: int, frame: FrameType | None) -> None:
        self.stopped = True

    def restore(self) -> None:
        for s, handler in self.previous.items():
            signal.signal(s, handler)


def preflight() -> str | None:
    """What stops this process from tracing, before anything is built or loaded."""
    missing = loader.missing_privileges()
    if missing:
        return missing
    if not BTF_PATH.exists():
        return f"no kernel BTF at {BTF_PATH}: needs a kernel built with CONFIG_DEBUG_INFO_BTF=y"
    return None


def run(args: argparse.Namespace) -> int:
    try:
        opts = parse_options(args)
    except ValueError as exc:
        return fail(str(exc), 2)
    problem = preflight()
    if problem:
        return fail(problem)
    try:
        alerting = live.Alerting.from_args(args.rules, folding=args.tcp_fold) if args.alerts else None
    except ConfigError as exc:
        return fail(str(exc), 2)
    try:
        sink = open_sink(args)
    except (ValueError, ImportError) as exc:
        if alerting is not None:
            alerting.close()
        return fail(str(exc), 2)
    except OSError as exc:
        if alerting is not None:
            alerting.close()
        return fail(f"cannot open output: {exc}")
    stop = StopFlag()  # before anything is attached: a signal at any point ends in a clean detach
    try:
        return trace(opts, sink, stop, args, alerting)
    finally:
        stop.restore()
        if alerting is not None:
            alerting.close()


def trace(
    opts: Options, sink: Sink, stop: StopFlag, args: argparse.Namespace, alerting: live.Alerting | None = None
) -> int:
    session = KernelSession(opts)
    try:
        session.__enter__()
    except (BpfError, BuildError) as exc:
        sink.close()
        return fail(str(exc))
    follow = sink if getattr(args, "providers_from_server", False) else None
    swap = Swap(follow, opts, PROG)  # type: ignore[arg-type]  # the HTTP sink has `tracing`
    # one baseline across swaps; a netns filter keeps them to that namespace
    counters = (
        StackCounters(only_netns=opts.filters.netns, listen_filter=listen_filter(opts.filters))
        if not args.no_stack_counters
        else None
    )
    origin, untraced_ns = COMMAND_LINE, None
    source: KernelSource | None = None  # the last session's: the next one goes on from what it knew
    deadline = None if args.duration is None else time.monotonic() + args.duration  # across swaps
    try:
        while True:
            announce(session)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            source = collect(
                session, sink, stop, left, args.flow_interval, alerting, not args.no_stack_counters,
                args.stats_interval, swap=swap, counters=counters, origin=origin, untraced_ns=untraced_ns,
                before=source,
            )  # fmt: skip
            print(f"{PROG}: {source.totals.summary()}", file=sys.stderr)
            following = swap.take()
            if following is None:
                break
            session.close()  # detached and drained by poll_batches, `following` attached
            session, untraced_ns, origin = following, swap.untraced_ns, swap.origin
            if swap.failed:  # loaded but would not attach: back to the command line's set
                print(f"{PROG}: {swap.failed}; tracing {','.join(opts.providers)} again", file=sys.stderr)
                failed = session
                failed.detach()  # what of it did attach
                session = KernelSession(opts, carry_from=failed)  # keeps the owners
                try:
                    session.__enter__()
                finally:
                    failed.close()
                untraced_ns, origin, swap.failed = time.monotonic_ns() - swap.started_ns, COMMAND_LINE, ""
    except (BpfError, BuildError) as exc:
        return fail(str(exc))
    finally:
        pending = swap.take()  # attached by a switch an exception then cut short
        if pending is not None:
            pending.close()
        session.close()
        sink.close()
    return 0


def announce(session: KernelSession) -> None:
    """The "tracing" line on stderr (readers wait for it), after what this kernel cannot give."""
    ids = " ".join(f"{name}#{pid}" for name, pid in session.program_ids().items())
    missing = [*((n, "absent on this kernel") for n in session.absent), *session.failed.items()]
    also = "; not attached: " + ", ".join(f"{name} ({why})" for name, why in missing) if missing else ""
    for provider, field, why in session.degraded:
        print(f"{PROG}: degraded: {provider} {field}: {why}", file=sys.stderr)
    print(f"{PROG}: tracing {','.join(session.opts.providers)} (programs {ids}){also}", file=sys.stderr, flush=True)


def collect(
    session: KernelSession,
    sink: Sink,
    stop: StopFlag,
    duration: float | None,
    flow_interval: float,
    alerting: live.Alerting | None = None,
    stack_counters: bool = True,
    stats_interval: float = DEFAULT_INTERVAL_S,
    *,
    swap: Swap | None = None,
    counters: StackCounters | None = None,
    origin: str = COMMAND_LINE,
    untraced_ns: int | None = None,
    before: KernelSource | None = None,
) -> KernelSource:
    """Trace until stopped, the duration ends or `swap` has the next session loaded;
    `before`: the source of the session this one follows, whose knowledge of each socket
    it takes over."""
    env = KernelEnv(
        host_id=identity.host_id(),
        boot_id=identity.boot_id(),
        wall_offset=wall_offset(),
        drop_reasons=session.drop_reasons,
        rst_reasons=session.rst_reasons,
        wire=True,  # sinks encode wire dicts directly; the stdout sink builds Structs for xo
        symbolize=kernel_symbols().symbolize,
    )
    source = KernelSource(session, env, flow_interval)
    if before is not None:
        source.take_over(before)
    if counters is None and stack_counters:
        counters = StackCounters(
            only_netns=session.opts.filters.netns, listen_filter=listen_filter(session.opts.filters)
        )
    health = SelfHealth(source, env, stats_interval, counters if stack_counters else None)
    extras = live.Extras(source, env, sink, counters if stack_counters else None, health)
    status = status_record(session, env, stack_counters, origin, untraced_ns)
    batches = itertools.chain([source.number([status])], poll_batches(session, source, extras, stop, duration, swap))
    keeper = ring_keeper(session, sink)
    if alerting is None:
        for records in batches:
            if records:
                sink.write(records)
    else:
        alerting.stream(batches, sink)
    if keeper is not None:
        keeper.close()  # the ring's final read is done: nothing is left for it to count
    return source


def ring_keeper(session: KernelSession, sink: Sink) -> RingKeeper | None:
    """A keeper of this session's ring (collector/bpf/keeper.py), where a sink spools: if
    this process is killed, the events it had not read are counted for the next collector."""
    spool = getattr(getattr(sink, "spool", None), "dir", None)
    if spool is None:
        return None
    try:
        return RingKeeper.start(session.ring_fd(), session.opts.ringbuf_bytes, layout.EVENT_SIZE, spool)
    except OSError as exc:
        print(f"{PROG}: events unread if this collector is killed cannot be counted: {exc}", file=sys.stderr)
        return None


def status_record(
    session: KernelSession, env: KernelEnv, stack_counters: bool, origin: str = COMMAND_LINE,
    untraced_ns: int | None = None,
) -> KernelRecord:  # fmt: skip
    """H3: what is attached and which rules therefore cannot fire, sent first (and after a swap)."""
    opts = session.opts
    return coverage.collector_status(
        env, opts.providers, session.program_ids(), session.absent, session.failed, session.drop_reasons.values(),
        stack_counters=stack_counters, ppl=opts.ppl, ip_sample=opts.ip_sample, drop_rate=opts.drop_rate,
        skb_sample=opts.skb_sample if "skb-lifecycle" in opts.providers else None,
        skb_stages=loader.skb_stages(opts) if "skb-lifecycle" in opts.providers else None,
        skb_window=window.arg() if (window := loader.skb_window(opts)) else None,
        lost=variants.by_provider(session.degraded), providers_from=origin, untraced_ns=untraced_ns,
    )  # fmt: skip


def poll_batches(
    session: KernelSession,
    source: KernelSource,
    extras: live.Extras,
    stop: StopFlag,
    duration: float | None,
    swap: Swap | None = None,
) -> Iterator[list[KernelRecord]]:
    """Each poll's records (empty when idle), then the final drain after detaching."""
    deadline = None if duration is None else time.monotonic() + duration
    while not stop.stopped and (deadline is None or time.monotonic() < deadline):
        timeout = 0.1 if deadline is None else max(0.0, min(0.1, deadline - time.monotonic()))
        records = source.poll(timeout)
        yield extras.add(records)
        if swap is not None and swap.due(session.opts, session):
            break
    swapping = swap is not None and swap.next is not None
    if swap is not None and swapping:
        swap.switch(session)  # the next programs run from here; this ring is still read below
    else:
        session.detach()  # no new events; what is in the ring is still read below
    yield extras.add(source.poll(final=True), final=True, stopping=not swapping)
