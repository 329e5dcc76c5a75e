"""Load kmod/nettrail.bpf.o with libbpf and attach the programs the chosen providers need.

The steps are always the same (open, configure, load, attach, poll, clean up) and
each failure says which step failed on what and why, e.g.
"failed to attach tcp_probe: Operation not permitted (needs CAP_BPF)".
Before opening the object it reads the running kernel's BTF (collector/bpf/variants.py):
the tracepoints it lacks are left out, each tracepoint gets the program variant for its
prototype there, and what that costs is kept in ``degraded`` (provider, field, why).
Keep PROGRAMS in sync with the SEC("tp_btf/...") programs of kmod/*.bpf.c and the config writer
with struct nt_config (kmod/nettrail.h, collector/bpf/layout.py).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import ipaddress
import mmap
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import numpy as np

from collector.bpf import btf, build, cgroup, layout, libbpf, settle, tracepoints, variants
from collector.bpf.ringbuf import RingReader
from translators.skb_window import WindowSpec
from translators.tracing_request import PROVIDER_NAMES

# "skb" is drops only (the always-on mode); "skb-lifecycle" follows every buffer (and its drops).
# "ip-flows" is ip's always-on mode: exact per-flow counters, a record only per sampled packet.
# "udp-calls" is udp's: the send and receive calls' records, without the device's per packet.
# "siftr-poll" is siftr's: each socket's control block sampled every --poll-interval by an
# iterator (kmod/siftr_poll.bpf.c), not at its packets.
PROVIDERS = PROVIDER_NAMES
PROVIDER_BITS = {
    "tcp": layout.PROV_TCP,
    "siftr": layout.PROV_SIFTR,
    "tcpdebug": layout.PROV_TCPDEBUG,
    "skb": layout.PROV_SKB,
    "udp": layout.PROV_UDP,
    "ip": layout.PROV_IP,
    "skb-lifecycle": layout.PROV_SKB_LIFE,
    "ip-flows": layout.PROV_IP_FLOWS,
    "udp-calls": layout.PROV_UDP_CALLS,
    "siftr-poll": layout.PROV_SIFTR_POLL,
}
ALWAYS: frozenset[str] = frozenset(PROVIDERS)
# program (= tracepoint) -> providers that need it. The attribution programs are
# needed by every provider: they fill the socket-owner map (providers.md 9.3), and
# attribution asks whether an event fired in task context, which the preempt count tells
# or, on a kernel where a program cannot find it, softirq_entry and softirq_exit
# (kmod/context.bpf.c; context_source()).
PROGRAMS: dict[str, frozenset[str]] = {
    "inet_sock_set_state": ALWAYS,
    "sock_send_length": ALWAYS,
    "sock_recv_length": ALWAYS,
    # before 6.3, TCP's send and receive calls at tcp_sendmsg/tcp_recvmsg's exits instead (fexit)
    "tcp_sendmsg": ALWAYS,
    "tcp_recvmsg": ALWAYS,
    "tcp_destroy_sock": ALWAYS,
    "softirq_entry": ALWAYS,
    "softirq_exit": ALWAYS,
    "tcp_retransmit_skb": frozenset({"tcp"}),
    "tcp_retransmit_synack": frozenset({"tcp"}),
    "tcp_send_reset": frozenset({"tcp"}),
    "tcp_receive_reset": frozenset({"tcp"}),
    "tcp_cong_state_set": frozenset({"tcp"}),
    "tcp_probe": frozenset({"siftr", "tcpdebug"}),
    "net_dev_queue": frozenset({"siftr", "tcpdebug", "ip", "ip-flows", "udp", "skb-lifecycle"}),
    "netif_receive_skb": frozenset({"ip", "ip-flows", "udp", "skb-lifecycle"}),
    "napi_gro_receive_entry": frozenset({"skb-lifecycle"}),  # receive entry hooks: lifetimes start there
    "netif_rx_entry": frozenset({"skb-lifecycle"}),
    "netif_receive_skb_entry": frozenset({"skb-lifecycle"}),
    "net_dev_start_xmit": frozenset({"skb-lifecycle"}),
    "net_dev_xmit": frozenset({"skb-lifecycle"}),
    "skb_copy_datagram_iovec": frozenset({"skb-lifecycle"}),
    "consume_skb": frozenset({"skb-lifecycle"}),
    "kfree_skb": frozenset({"tcpdebug", "skb", "skb-lifecycle"}),
    "udp_fail_queue_rcv_skb": frozenset({"udp", "udp-calls"}),
    # cgroup sock_addr programs, not tracepoints (kmod/udp_peer.bpf.c): they run for UDP
    # calls only, for the peer of an unconnected socket's call and the sender of a datagram
    # before it leaves (which the skb provider's drops are attributed to)
    "udp_sendmsg4": frozenset({"udp", "udp-calls", "skb", "skb-lifecycle"}),
    "udp_sendmsg6": frozenset({"udp", "udp-calls", "skb", "skb-lifecycle"}),
    "udp_recvmsg4": frozenset({"udp", "udp-calls"}),
    "udp_recvmsg6": frozenset({"udp", "udp-calls"}),
    # an iterator over a network namespace's TCP sockets, run by the collector in each one
    # every --poll-interval (collector/bpf/poll.py): on no packet's path
    "siftr_poll": frozenset({"siftr-poll"}),
}
# Where the udp providers' call records come from (udp_call_source). Before Linux 6.3 (no
# sock_send_length / sock_recv_length): the exits of the UDP protocol's send and receive
# functions (fexit, kmod/udp_functions.bpf.c; they run for UDP calls only), or where the
# kernel refuses those or their prototypes differ, one program at the exit of every system
# call (kmod/udp_syscalls.bpf.c; about 3% more CPU per byte, docs/benchmarks.md).
UDP_CALL_SOURCES = ("socket tracepoints", "kernel functions", "system calls")
FUNCTION_PROGRAMS = variants.UDP_FUNCTIONS
SYSCALL_PROGRAMS = (variants.SYSCALL_TRACEPOINT,)
PROGRAMS.update(dict.fromkeys(FUNCTION_PROGRAMS + SYSCALL_PROGRAMS, frozenset({"udp", "udp-calls"})))
SOURCE_PROGRAMS = {"kernel functions": FUNCTION_PROGRAMS, "system calls": SYSCALL_PROGRAMS}
# Where TCP's send and receive calls are seen (tcp_call_source): sock_send_length and
# sock_recv_length (6.3+), else the exits of tcp_sendmsg/tcp_recvmsg (fexit,
# kmod/tcp_functions.bpf.c) where the kernel takes them and their prototypes are kmod/'s,
# else nowhere (attribution at connect/listen/close only, no tcpdebug SEND/RCVD).
TCP_CALL_SOURCES = ("socket tracepoints", "kernel functions", "none")
TCP_FUNCTION_PROGRAMS = variants.TCP_FUNCTIONS
ITER_PROGRAMS = frozenset({"siftr_poll"})
# Before 5.12 tracing programs cannot ask for a socket's cookie: these cgroup programs
# (kmod/attribution.bpf.c) ask for it at socket() and as a passive child is established,
# and the legacy object's tracing programs read it from the socket. Attached first, on the
# cgroup v2 root, and only with that object (legacy_object); what differs is named in
# `degraded`.
COOKIE_PROGRAMS = ("sock_create", "sock_ops")
PROGRAMS = {**dict.fromkeys(COOKIE_PROGRAMS, ALWAYS), **PROGRAMS}
COOKIE_LOSES = (
    "sock_cookie",
    "tracing programs cannot ask for a socket's cookie before Linux 5.12: it is read from the socket, which "
    "sock_create and sock_ops give one at socket() and as a passive child is established; a socket without one "
    "(made before the collector started, a kernel's own) carries a substitute (bit 62 set), not SO_COOKIE's",
)
COOKIE_CGROUP_LOSES = "no cgroup v2 hierarchy for sock_create and sock_ops: every socket's cookie is a substitute"
DEFAULT_POLL_INTERVAL_S = 0.1
MIN_POLL_INTERVAL_S, MAX_POLL_INTERVAL_S = 0.01, 60.0  # a visit per socket per poll; K7's 2 s wants several
# tcp --tcp-fold (kmod/fold.bpf.h): a socket's state and congestion-state changes folded in
# its socket storage and emitted as one tcp_lifecycle record; a socket folded longer than
# --fold-window is flushed by siftr-poll's iterator and streams from then on. Without
# siftr-poll the collector runs that iterator for the fold alone, every FOLD_POLL_S (or
# the window, if shorter): a socket is on the dashboard within the window plus that.
DEFAULT_FOLD_WINDOW_S = 1.0
FOLD_POLL_S = 1.0
MIN_FOLD_WINDOW_S, MAX_FOLD_WINDOW_S = 0.01, 3600.0  # the fold's times are u32 microseconds: 71 minutes
FOLD_KERNEL = (5, 11)  # bpf_sk_storage_get in tracing programs (tp_btf, iter): Linux 5.11
CGROUP_PROGRAMS = frozenset({"udp_sendmsg4", "udp_sendmsg6", "udp_recvmsg4", "udp_recvmsg6"})
# Without the cgroup programs (no cgroup v2 hierarchy, or a kernel that refuses them), the
# skb provider notes a UDP sender at net_dev_queue instead (a program on every packet sent),
# and this is what the udp providers lose.
CGROUP_FALLBACK = {"net_dev_queue": frozenset({"skb"})}
CGROUP_LOSES = (
    ("udp", "dst/dport of unconnected sockets' calls", "{why}"),
    ("udp-calls", "dst/dport of unconnected sockets' calls", "{why}"),
)
# skb-lifecycle's intermediate stages (--skb-stages all): the receive entry hooks before
# GRO and transmit start/done. They fire for every buffer, followed or not, so with sampled
# lifecycles (--skb-sample N > 1) they are left out by default (--skb-stages ends): a
# followed buffer keeps its first sighting (net_dev_queue / netif_receive_skb), its copy
# to its reader (skb_copy_datagram_iovec) and its end (consume_skb, kfree_skb, the
# consume inferred at sock_recv_length); docs/collector.md, "Stages recorded".
SKB_STAGE_PROGRAMS = frozenset(
    {"napi_gro_receive_entry", "netif_rx_entry", "netif_receive_skb_entry", "net_dev_start_xmit", "net_dev_xmit"}
)
SKB_STAGES = ("all", "ends")
# skb-lifecycle in windows (--skb-window, collector/bpf/windows.py): the hooks attached for
# a window only, where no other chosen provider needs them (kfree_skb is skb's, whose drop
# counts are exact; the cgroup programs run per call, not per buffer). First sightings go
# last at a window's opening and first at its close, the later stages and ends after.
WINDOW_START = (
    "net_dev_queue",
    "netif_receive_skb",
    "napi_gro_receive_entry",
    "netif_rx_entry",
    "netif_receive_skb_entry",
)
WINDOW_END = ("net_dev_start_xmit", "net_dev_xmit", "skb_copy_datagram_iovec", "consume_skb")
# in_task()'s state (kmod/context.bpf.c), attached first and in this order: see attach_programs
CONTEXT_PROGRAMS = ("softirq_exit", "softirq_entry")
# Where in_task() reads whether an event fired in task context (kmod/core_fixes.bpf.h):
# the preempt count in current's thread_info (arm64 and others), the x86 per-CPU preempt
# count found from the CPU's runqueue, or the softirq words CONTEXT_PROGRAMS keep.
CONTEXT_SOURCES = ("thread_info", "runqueue", "softirq hooks")
CTX_FROM_HOOKS_LOSES = "a hard interrupt taken in a task is the task's: the preempt count cannot be read here"
# Attribution programs a kernel may lack: sock_send_length/sock_recv_length came with 6.3.
# Without them sockets are still attributed, at connect/listen/close (inet_sock_set_state),
# by inheritance from the listener and by the owner map; what is lost is named (variants.py).
OPTIONAL_ATTRIBUTION = frozenset({"sock_send_length", "sock_recv_length"})
# Who owns each socket, kept by the attribution programs every provider loads: a session
# that follows another (a swap of providers, collector/bpf/swap.py) takes these maps over,
# so a socket opened or a listener bound before the swap keeps its owner after it (its
# events in softirq context have no other source). owner_hints is not among them: its
# entries are trusted against owner_epoch, a global of each object.
ATTRIBUTION_MAPS = ("owners", "listeners", "port_owners", "closed")
DEFAULT_RINGBUF_BYTES = 16 * 1024 * 1024
DEFAULT_IP_FLOWS_MAX = 16384  # entries of the ip_flows LRU map (about 100 bytes each)
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39
PRIVILEGE_HINT = "needs root, or CAP_BPF and CAP_PERFMON"


class BpfError(RuntimeError):
    """A loader step failed; str() is the one-line message for the user."""


@dataclass(frozen=True)
class Filters:
    """In-kernel filters (0/None = any). pid matches the attributed process (tgid)."""

    pid: int = 0
    port: int = 0
    addr: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None
    cgroup: int = 0
    netns: int = 0


def parse_filters(text: str) -> Filters:
    """'pid=1,port=80,addr=::1,cgroup=5,netns=4026531840' -> Filters; ValueError names the bad item."""
    values: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or key not in ("pid", "port", "addr", "cgroup", "netns"):
            raise ValueError(f"bad filter {item!r}: use pid=N, port=N, addr=IP, cgroup=ID or netns=INODE")
        try:
            values[key] = ipaddress.ip_address(value) if key == "addr" else int(value, 0)
        except ValueError:
            raise ValueError(f"bad filter {item!r}: {value!r} is not a valid {key}") from None
        if key == "port" and not 0 < int(values[key]) < 65536:  # type: ignore[call-overload]
            raise ValueError(f"bad filter {item!r}: port must be 1-65535")
    return Filters(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Options:
    providers: tuple[str, ...] = PROVIDERS
    ppl: int = 1
    filters: Filters = field(default_factory=Filters)
    ringbuf_bytes: int = DEFAULT_RINGBUF_BYTES
    object_path: Path | None = None
    exclude_pid: int = 0  # the collector's own process, whose shipping would trace itself
    drop_rate: int = 0  # skb: drop events per second per CPU (0 = all); drop counts stay exact
    ip_sample: int = 0  # ip-flows: an ip_packet record for 1 packet in N of each flow entry (0 = none)
    ip_flows_max: int = DEFAULT_IP_FLOWS_MAX  # ip-flows: LRU map size; evictions are reported as loss
    skb_sample: int = 1  # skb-lifecycle: follow one buffer in N (1 = every buffer); the counts stay exact
    # skb-lifecycle: "all" stages or "ends" only (SKB_STAGE_PROGRAMS left out); None:
    # "ends" when sampled (skb_sample > 1), "all" when every buffer is followed
    skb_stages: str | None = None
    # skb-lifecycle's hooks attached only OPEN seconds of every EVERY (None: always)
    skb_window: WindowSpec | None = None
    # in_task() from softirq_entry/exit even where the preempt count can be read (to test
    # and measure that fallback)
    softirq_hooks: bool = False
    # siftr-poll: seconds between polls of every followed socket's control block
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    # where udp call records come from (one of UDP_CALL_SOURCES; None: the best this kernel
    # has). Chosen, to test and measure the sources a kernel before 6.3 gets on a newer one.
    udp_call_source: str | None = None
    # tcp: fold each socket's state and congestion-state changes into one tcp_lifecycle
    # record (kmod/fold.bpf.h); off by default, so the default records stay the streamed ones
    tcp_fold: bool = False
    fold_window_s: float = DEFAULT_FOLD_WINDOW_S  # --tcp-fold: a socket folded longer is flushed


def kernel_version(release: str | None = None) -> tuple[int, int]:
    """(major, minor) of the running kernel (or of `release`), (0, 0) if it cannot be read."""
    found = re.match(r"(\d+)\.(\d+)", release if release is not None else os.uname().release)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def fold_unusable(opts: Options, iter_why: str | None = None, release: str | None = None) -> str | None:
    """Why --tcp-fold cannot run with these options here (None: it can, or was not asked).
    The flush of a socket folded past the window is siftr-poll's iterator's work (run for
    the fold alone without siftr-poll), so the fold needs it; before 5.11 no tracing program
    may use socket storage."""
    if not opts.tcp_fold:
        return None
    if "tcp" not in opts.providers:
        return "--tcp-fold folds the tcp provider's records, which is not chosen"
    if iter_why is not None:
        return f"the TCP iterator, which flushes a socket folded longer than --fold-window, is left out: {iter_why}"
    if kernel_version(release) < FOLD_KERNEL:
        return "socket storage in tracing programs (bpf_sk_storage_get) came with Linux 5.11"
    return None


def fold_window_ms(opts: Options, iter_why: str | None = None) -> int:
    """nt_config.fold_window_ms: the window, 0 (the fold off) where it is not asked or cannot run."""
    if not opts.tcp_fold or fold_unusable(opts, iter_why) is not None:
        return 0
    return max(1, round(opts.fold_window_s * 1000))


def program_names(
    opts: Options, cgroup_programs: bool = True, functions: bool = True, tcp_functions: bool = True
) -> list[str]:
    """The programs these options need on this kernel, in PROGRAMS order (before its absences);
    `cgroup_programs` False: without CGROUP_PROGRAMS, and with their fallback; `functions`
    False: the kernel refused FUNCTION_PROGRAMS (udp_call_source); `tcp_functions` False:
    it refused TCP_FUNCTION_PROGRAMS (tcp_call_source)."""
    wanted = set(opts.providers)
    skip = SKB_STAGE_PROGRAMS if skb_stages(opts) == "ends" else frozenset()
    if context_source(opts) != "softirq hooks":
        skip |= set(CONTEXT_PROGRAMS)
    if not cgroup_programs:
        skip |= CGROUP_PROGRAMS
    if not legacy_object() or cgroup.root() is None:
        skip |= set(COOKIE_PROGRAMS)
    source = udp_call_source(opts, functions) if wanted & {"udp", "udp-calls"} else "socket tracepoints"
    for other, names in SOURCE_PROGRAMS.items():
        if other != source:
            skip |= set(names)
    if tcp_call_source(tcp_functions) != "kernel functions":
        skip |= set(TCP_FUNCTION_PROGRAMS)

    def needed_by(name: str) -> frozenset[str]:
        needs = PROGRAMS[name] | (CGROUP_FALLBACK.get(name, frozenset()) if not cgroup_programs else frozenset())
        if source != "socket tracepoints" and name in CGROUP_PROGRAMS:  # those programs read the peers themselves
            needs -= {"udp", "udp-calls"}
        return needs

    # tcp --tcp-fold: siftr-poll's iterator flushes the folds, run for that alone without siftr-poll
    folds = opts.tcp_fold and fold_unusable(opts) is None
    return [
        name for name in PROGRAMS if (needed_by(name) & wanted or folds and name in ITER_PROGRAMS) and name not in skip
    ]


def legacy_object() -> bool:
    """Whether this kernel loads the legacy object (before 5.12: variants.LEGACY_OBJECT),
    whose tracing programs read socket cookies and need COOKIE_PROGRAMS to make them."""
    return variants.object_for() == variants.LEGACY_OBJECT


def cgroup_unusable() -> str | None:
    """Why the cgroup programs cannot run here, or None. Before 6.2 (no bpf_rdonly_cast:
    the compat object) a cgroup program cannot read the socket behind its context, whose
    namespace the skb provider's sender note needs; the call records that use the peers
    came with 6.3 anyway."""
    if not btf.kfunc_exists(variants.RDONLY_CAST):
        return "a kernel before 6.2 (no bpf_rdonly_cast) cannot read a cgroup program's socket"
    if cgroup.root() is None:
        return "no cgroup v2 hierarchy is mounted"
    return None


def context_source(opts: Options) -> str:
    """Where in_task() learns the context on this kernel (one of CONTEXT_SOURCES): the
    preempt count wherever a program can read it, since the softirq hooks cost two runs
    per softirq and must be attached before any event program (attach_programs)."""
    if opts.softirq_hooks:
        return "softirq hooks"
    if btf.has_member("thread_info", "preempt_count"):
        return "thread_info"
    if btf.preempt_count_from_runqueue() is not None:
        return "runqueue"
    return "softirq hooks"


def udp_call_source(opts: Options, functions: bool = True) -> str:
    """Where the udp providers' call records come from here (one of UDP_CALL_SOURCES): the
    socket tracepoints where the kernel has them (6.3+), else the UDP functions' exits where
    their prototypes are the ones kmod/ declares and the kernel took them (`functions`),
    else the system calls."""
    chosen = opts.udp_call_source
    if chosen is not None and chosen not in UDP_CALL_SOURCES:
        raise ValueError(f"udp call source {chosen!r}: choose from {', '.join(UDP_CALL_SOURCES)}")
    if chosen is None and socket_call_tracepoints():
        return "socket tracepoints"
    if chosen in (None, "kernel functions") and functions and functions_match():
        return "kernel functions"
    return chosen if chosen == "socket tracepoints" else "system calls"


@functools.cache
def socket_call_tracepoints() -> bool:
    """Whether this kernel has sock_send_length and sock_recv_length (6.3+); asked at every
    program_names(), a window's toggle included, so read once."""
    return not tracepoints.absent(["sock_send_length", "sock_recv_length"])


def tcp_call_source(functions: bool = True) -> str:
    """Where TCP's send and receive calls are seen here (one of TCP_CALL_SOURCES); `functions`
    False: the kernel refused TCP_FUNCTION_PROGRAMS."""
    if socket_call_tracepoints():
        return "socket tracepoints"
    return "kernel functions" if functions and tcp_functions_match() else "none"


def tcp_functions_match() -> bool:
    """Whether this kernel's tcp_sendmsg/tcp_recvmsg take parameters kmod/ has a program for."""
    return all(btf.func_args(name) in n for name, n in variants.TCP_FUNCTION_ARGS.items())


def functions_match() -> bool:
    """Whether this kernel's UDP send/receive functions take the parameters kmod/ declares."""
    return all(btf.func_args(name) == n for name, n in variants.UDP_FUNCTION_ARGS.items())


def skb_stages(opts: Options) -> str:
    """The stages skb-lifecycle records with these options: "all" or "ends"."""
    if opts.skb_stages is not None:
        if opts.skb_stages not in SKB_STAGES:
            raise ValueError(f"skb stages {opts.skb_stages!r}: choose from {', '.join(SKB_STAGES)}")
        return opts.skb_stages
    return "ends" if opts.skb_sample > 1 else "all"


def skb_window(opts: Options) -> WindowSpec | None:
    """The windows skb-lifecycle runs in with these options (None: it is not chosen, or always on)."""
    return opts.skb_window if "skb-lifecycle" in opts.providers else None


def missing_privileges() -> str | None:
    """Why this process cannot load BPF programs, or None if it can."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    line = next((ln for ln in status.splitlines() if ln.startswith("CapEff:")), None)
    if line is None:
        return None
    caps = int(line.split()[1], 16)
    if caps & (1 << CAP_SYS_ADMIN) or (caps & (1 << CAP_BPF) and caps & (1 << CAP_PERFMON)):
        return None
    return f"loading eBPF programs {PRIVILEGE_HINT} (CapEff={caps:#x})"


def config_bytes(
    opts: Options, drop_reasons: dict[int, str], functions: bool = True, iter_why: str | None = None
) -> bytes:
    """struct nt_config for these options (`functions`: as program_names; `iter_why`: why
    siftr-poll's iterator is left out, which turns the fold off)."""
    cfg = np.zeros((), dtype=layout.dtype_of(layout.CONFIG))
    f = opts.filters
    cfg["cgroup_id"] = f.cgroup
    cfg["tgid"] = f.pid
    cfg["netns"] = f.netns
    cfg["port"] = f.port
    cfg["exclude_tgid"] = opts.exclude_pid
    cfg["drop_rate"] = opts.drop_rate
    cfg["ppl"] = max(1, opts.ppl)
    cfg["ip_sample"] = max(0, opts.ip_sample)
    cfg["skb_sample"] = max(1, opts.skb_sample)
    cfg["skb_windowed"] = 1 if skb_window(opts) else 0
    udp = {"udp", "udp-calls"} & set(opts.providers)
    cfg["udp_calls_from"] = UDP_CALL_SOURCES.index(udp_call_source(opts, functions)) if udp else 0
    cfg["preempt_from_rq"] = btf.preempt_count_from_runqueue() if context_source(opts) == "runqueue" else 0
    cfg["providers"] = sum(PROVIDER_BITS[p] for p in opts.providers)
    cfg["fold_window_ms"] = fold_window_ms(opts, iter_why)
    mask = [0, 0]
    for value, name in drop_reasons.items():
        if name.startswith("TCP_") and 0 <= value < 128:
            mask[value >> 6] |= 1 << (value & 63)
    cfg["drop_reasons"] = mask
    if f.addr is not None:
        cfg["addr_family"] = 2 if f.addr.version == 4 else 10
        cfg["addr"] = np.void(f.addr.packed.ljust(layout.ADDR_LEN, b"\0"))
    return cfg.tobytes()


def _why(err: int) -> str:
    text = os.strerror(err)
    if err == errno.EPERM:  # EACCES from a load is the verifier saying no, not privileges
        return f"{text} ({PRIVILEGE_HINT})"
    return text


class KernelSession:
    """One loaded object: `with KernelSession(opts) as s:` opens, configures, loads and
    attaches; leaving the block (normally, by signal or by exception) detaches everything."""

    def __init__(self, opts: Options, carry_from: KernelSession | None = None) -> None:
        self.opts = opts
        self.carry_from = carry_from  # the session whose attribution maps this one takes over (at configure)
        self.lib = libbpf.get()
        self.obj = 0
        self.links: dict[str, int] = {}
        self.reader: RingReader | None = None
        self.slots: mmap.mmap | None = None  # flow_slots, mapped on first read
        self.ip_slot_map: mmap.mmap | None = None  # ip_slots, mapped on first read
        self.absent: list[str] = []  # tracepoints the chosen providers use that this kernel lacks: not loaded
        self.failed: dict[str, str] = {}  # tracepoint -> why its program did not attach
        self.choice = variants.Choice(variants.OBJECT, {}, ())
        self.degraded: tuple[tuple[str, str, str], ...] = ()  # (provider, field, why) this kernel cannot give
        self.cgroup_why: str | None = None  # why the cgroup programs are left out (None: they are not)
        self.iter_why: str | None = None  # why siftr-poll's iterator is left out (None: it is not)
        self.functions_why: str | None = None  # why the UDP functions' fexit programs are left out
        self.tcp_functions_why: str | None = None  # why the TCP functions' fexit programs are left out
        self.refused: list[str] = []  # the programs the kernel refused at the last load
        self.cgroup_fd = -1  # the cgroup v2 root they attach to
        self.drop_reasons = btf.drop_reasons() or dict(variants.UNNAMED_DROP_REASONS)  # before 5.17: none
        self.rst_reasons = btf.rst_reasons()
        self.ncpus = self.lib.libbpf_num_possible_cpus()

    # -- steps -------------------------------------------------------------------------
    def open(self) -> None:
        # A program on a tracepoint this kernel lacks would fail the whole object's load:
        # leave it out and report it (H3); the attribution programs are not optional.
        if self.cgroup_why is None and CGROUP_PROGRAMS & set(self.program_names()):
            self.cgroup_why = cgroup_unusable()
        not_tracepoints = CGROUP_PROGRAMS | ITER_PROGRAMS | set(FUNCTION_PROGRAMS) | set(COOKIE_PROGRAMS)
        not_tracepoints |= set(TCP_FUNCTION_PROGRAMS)
        self.absent = tracepoints.absent(n for n in self.program_names() if n not in not_tracepoints)
        required = [n for n in self.absent if PROGRAMS[n] == ALWAYS and n not in OPTIONAL_ATTRIBUTION]
        if required:
            raise BpfError(f"this kernel has no tracepoint {', '.join(required)}: nettrail cannot attribute sockets")
        self.choice = variants.choose(self.program_names(), self.absent, self.opts.providers)
        self.degraded = self.choice.degraded
        if context_source(self.opts) == "softirq hooks":  # what the softirq words cannot tell
            self.degraded += tuple((p, "ctx", CTX_FROM_HOOKS_LOSES) for p in self.opts.providers)
        if self.functions_why is not None and {"udp", "udp-calls"} & set(self.opts.providers):
            self.degraded += tuple((p, "udp_call.kernel_functions", self.functions_why)
                                   for p in ("udp", "udp-calls") if p in self.opts.providers)  # fmt: skip
        if self.tcp_functions_why is not None:  # the absent tracepoints' losses are named too
            self.degraded += tuple((p, "tcp_call.kernel_functions", self.tcp_functions_why)
                                   for p in ("tcp", "tcpdebug") if p in self.opts.providers)  # fmt: skip
        if self.cgroup_why is not None and self.udp_call_source() == "socket tracepoints":
            lost = ((p, what, why.format(why=self.cgroup_why)) for p, what, why in CGROUP_LOSES)
            self.degraded += tuple(d for d in lost if d[0] in self.opts.providers)
        if legacy_object():
            what, why = COOKIE_LOSES if cgroup.root() is not None else (COOKIE_LOSES[0], COOKIE_CGROUP_LOSES)
            self.degraded += tuple((p, what, why) for p in self.opts.providers)
        if self.iter_why is not None and "siftr-poll" in self.opts.providers:
            self.degraded += (("siftr-poll", "siftr_sample", self.iter_why),)
        fold_why = fold_unusable(self.opts, self.iter_why)
        if fold_why is not None:  # asked for and not given: the records stream as without it
            self.degraded += (("tcp", "tcp_lifecycle", fold_why),)
        path = self.opts.object_path or build.ensure_built(self.choice.object_name)
        self.lib.take_messages()
        obj = self.lib.bpf_object__open_file(str(path).encode(), None)
        if not obj:
            raise BpfError(f"failed to open {path}: {_why(ctypes.get_errno() or errno.EINVAL)}")
        self.obj = obj
        self.path = path

    def configure(self) -> None:
        loaded = set(self.loaded_names())
        for name in PROGRAMS:
            load = name in loaded
            chosen = self.choice.programs.get(name, name)
            self.lib.bpf_program__set_autoload(self._find_program(chosen), load)
            for other in variants.VARIANTS.get(name, ()):
                prog = self.lib.bpf_object__find_program_by_name(self.obj, other.program.encode())
                if prog and other.program != chosen:  # every other prototype's program stays out
                    self.lib.bpf_program__set_autoload(prog, False)
        self._write_config(config_bytes(self.opts, self.drop_reasons, self.functions_why is None, self.iter_why))
        events = self._map("events")
        if self.lib.bpf_map__set_max_entries(events, self.opts.ringbuf_bytes) < 0:
            raise BpfError(f"failed to size ring buffer to {self.opts.ringbuf_bytes} bytes")
        if self.lib.bpf_map__set_max_entries(self._map("ip_flows"), self.opts.ip_flows_max) < 0:
            raise BpfError(f"failed to size ip_flows to {self.opts.ip_flows_max} entries")
        # ip-flows' slots: NT_IP_SLOTS for each CPU that may run a program (an object built
        # before them, which a benchmark may load to compare, has none)
        slots = self.lib.bpf_object__find_map_by_name(self.obj, b"ip_slots")
        if slots and self.lib.bpf_map__set_max_entries(slots, layout.IP_SLOTS_PER_CPU * self.ncpus) < 0:
            raise BpfError(f"failed to size ip_slots for {self.ncpus} CPUs")
        self._carry_attribution()

    def _carry_attribution(self) -> None:
        """Take over the attribution maps of the session this one follows (same object only:
        another build's maps may be laid out otherwise)."""
        before = self.carry_from  # dropped once loaded (prepare): each swap would chain the last
        if before is None or not before.obj or before.path != self.path:
            return
        for name in ATTRIBUTION_MAPS:
            ret = self.lib.bpf_map__reuse_fd(self._map(name), before._map_fd(name))
            if ret < 0:
                raise BpfError(f"failed to take over {name} from the running programs: {os.strerror(-ret)}")

    def load(self) -> None:
        ret = self.lib.bpf_object__load(self.obj)
        if ret < 0:
            log = [m.strip() for m in self.lib.take_messages() if m.strip()]
            # libbpf names the program the kernel refused, whatever the error (EPERM included)
            self.refused = sorted(set(re.findall(r"prog '([^']+)': failed to load", "\n".join(log))))
            # the verifier's verdict is at the end of the longest message
            detail = "; ".join(m[-600:] for m in log[-3:]) if -ret != errno.EPERM else ""
            which = f" (program {', '.join(self.refused)})" if self.refused else ""
            raise BpfError(f"failed to load {self.path.name}{which}: {_why(-ret)}" + (f" [{detail}]" if detail else ""))

    def attach(self) -> None:
        self.attach_programs()
        self.open_reader()

    def open_reader(self) -> None:
        """Map the ring for reading (loaded is enough: a swap does it before its gap)."""
        if self.reader is None:
            self.reader = RingReader(self._map_fd("events"), self.opts.ringbuf_bytes, layout.EVENT_SIZE)

    def attach_programs(self) -> None:
        """Attach the loaded programs (again, after detach(): maps and ring are kept).

        Where in_task() reads the softirq words (context_source() "softirq hooks"), it
        must never see a softirq's entry without its exit: that CPU would call its tasks'
        events softirq (and drop their pid) until its next softirq ended, which a send
        made right after attaching once showed. So the softirq words start at 0,
        softirq_exit is attached before softirq_entry, and the event programs only once
        every CPU has left the softirq it may have been serving when softirq_entry came
        (whose events would otherwise be called task): an RCU grace period, which waits
        for every softirq under way (settle.py). detach() goes in reverse."""
        names = self.loaded_names()
        context = [n for n in CONTEXT_PROGRAMS if n in names]
        if context:
            self._clear_softirq_cpus()
            for name in context:
                self._attach_one(name)
            self._synchronize()
        windowed = set(self.window_names(WINDOW_START + WINDOW_END))
        if skb_window(self.opts) is not None:  # shut until the source opens the first window
            self._write_skb_window(closed=True)
        for name in [n for n in names if n not in CONTEXT_PROGRAMS and n not in windowed]:
            self._attach_one(name)

    def window_names(self, which: tuple[str, ...]) -> list[str]:
        """The loaded programs among `which` that skb-lifecycle's windows attach and detach:
        those no other chosen provider needs (none without --skb-window)."""
        if skb_window(self.opts) is None:
            return []
        wanted = set(self.opts.providers)
        return [n for n in self.loaded_names() if n in which and PROGRAMS[n] & wanted == {"skb-lifecycle"}]

    def set_skb_window(self, state: str) -> None:
        """skb-lifecycle's window (collector/bpf/windows.py): "open" attaches its end
        hooks, lets lifetimes start (`skb_window`) and attaches its first-sighting hooks;
        "closed" stops lifetimes starting and detaches the first-sighting hooks; "ended"
        detaches the end hooks."""
        if state == "open":
            self._attach_missing(self.window_names(WINDOW_END))
            self._write_skb_window(closed=False)
            self._attach_missing(self.window_names(WINDOW_START))
            return
        if state == "closed":
            self._write_skb_window(closed=True)
        for name in self.window_names(WINDOW_START if state == "closed" else WINDOW_END):
            link = self.links.pop(name, None)
            if link is not None:
                self.lib.bpf_link__destroy(link)

    def _attach_missing(self, names: list[str]) -> None:
        for name in names:
            if name not in self.links:
                self._attach_one(name)

    def _write_skb_window(self, closed: bool) -> None:
        key, value = ctypes.c_uint32(0), ctypes.c_uint32(1 if closed else 0)
        if self.lib.bpf_map_update_elem(self._map_fd("skb_window"), ctypes.byref(key), ctypes.byref(value), 0) < 0:
            raise BpfError(f"failed to write skb_window: {os.strerror(ctypes.get_errno())}")

    def _attach_one(self, name: str) -> None:
        if name in CGROUP_PROGRAMS or name in COOKIE_PROGRAMS:
            link = self._attach_cgroup(name)
        elif name in ITER_PROGRAMS:
            link = self.lib.bpf_program__attach_iter(self._program(name), None)
        else:
            link = self.lib.bpf_program__attach(self._program(name))
        if not link:
            err = ctypes.get_errno() or errno.EINVAL
            # Missing privileges or a broken attribution program stop tracing; any other
            # program that will not attach costs only the rules that need it (H3), and a
            # cgroup program (a container may keep the hierarchy's root from us, EPERM
            # included) the peers of unconnected sockets' calls; siftr-poll's iterator its samples.
            optional = name in CGROUP_PROGRAMS or name in ITER_PROGRAMS or name in FUNCTION_PROGRAMS
            optional = optional or name in TCP_FUNCTION_PROGRAMS  # their losses: attribution, SEND/RCVD
            # the cookie programs too: without them a socket's records carry a substitute (COOKIE_LOSES)
            optional = optional or name in COOKIE_PROGRAMS
            if (err in (errno.EPERM, errno.EACCES) and not optional) or (PROGRAMS[name] == ALWAYS and not optional):
                raise BpfError(f"failed to attach {name}: {_why(err)}")
            self.failed[name] = _why(err)
            return
        self.links[name] = link

    def _attach_cgroup(self, name: str) -> int | None:
        """A cgroup program on the root of the cgroup v2 hierarchy (a link: it goes with
        this process, and beside any other program there, never instead of it)."""
        if self.cgroup_fd < 0:
            path = cgroup.root()
            if path is None:
                ctypes.set_errno(errno.ENOENT)
                return None
            try:
                self.cgroup_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as exc:
                ctypes.set_errno(exc.errno or errno.EINVAL)
                return None
        return cast("int | None", self.lib.bpf_program__attach_cgroup(self._program(name), self.cgroup_fd))

    def run_iter(self, name: str) -> bool:
        """Run an attached iterator program once, over what it iterates in the calling
        thread's network namespace; False if it is not attached."""
        link = self.links.get(name)
        if link is None:
            return False
        fd = self.lib.bpf_iter_create(self.lib.bpf_link__fd(link))
        if fd < 0:
            raise BpfError(f"failed to run {name}: {os.strerror(-fd)}")
        try:
            while os.read(fd, 4096):  # the program writes to the ring, not here: one read ends it
                pass
        finally:
            os.close(fd)
        return True

    def _clear_softirq_cpus(self) -> None:
        """Every CPU's softirq word to 0: a detach can leave one at 1 (its entry seen, not its exit)."""
        zeros = np.zeros(self.ncpus, dtype="<u8")  # per-CPU values are padded to 8 bytes
        key = ctypes.c_uint32(0)
        if self.lib.bpf_map_update_elem(self._map_fd("softirq_cpus"), ctypes.byref(key), zeros.ctypes.data, 0) < 0:
            raise BpfError(f"failed to clear softirq_cpus: {os.strerror(ctypes.get_errno())}")

    def detach(self, settle: bool = True) -> None:
        """Stop the programs firing, in the reverse of attach order (the context programs
        last); maps and the ring stay readable until close(). settle: return only once no
        run of them is left (settle()), so a drain after this reads every event."""
        attached = bool(self.links)
        for link in reversed(list(self.links.values())):
            self.lib.bpf_link__destroy(link)
        self.links.clear()
        if attached and settle:
            self.settle()

    def settle(self) -> None:
        """Return once every run of the detached programs has ended (collector/bpf/settle.py):
        a run a CPU began just before the detach could otherwise write an event after the
        ring's final read, neither received nor counted lost."""
        self._synchronize()

    def _synchronize(self) -> None:
        try:
            settle.synchronize_rcu()
        except OSError as exc:
            raise BpfError(str(exc)) from exc

    def close(self) -> None:
        """Detach and free everything; safe to call twice and after a failed step."""
        self.detach(settle=False)  # nothing is read after this
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        if self.slots is not None:
            self.slots.close()
            self.slots = None
        if self.ip_slot_map is not None:
            self.ip_slot_map.close()
            self.ip_slot_map = None
        if self.obj:
            self.lib.bpf_object__close(self.obj)
            self.obj = 0
        if self.cgroup_fd >= 0:
            os.close(self.cgroup_fd)
            self.cgroup_fd = -1

    def prepare(self) -> None:
        """Open, configure and load (the verifier runs), nothing attached; closed on failure."""
        try:
            try:
                self.open()
                self.configure()
                self.load()
            except BpfError as exc:
                self.leave_out_refused(exc)
            self.carry_from = None
            settle.ready()  # detach() waits with it: made here, where a failure is said at once
        except OSError as exc:
            self.close()
            raise BpfError(str(exc)) from exc
        except BaseException:
            self.close()
            raise

    def leave_out_refused(self, exc: BpfError) -> None:
        """Load again without what the kernel refused, when that is optional: the UDP
        functions' fexit programs (the system calls' program is loaded instead, said in
        `degraded`), siftr-poll's iterator (its provider is left without samples, said in
        `failed` and `degraded`) and the cgroup programs (the peers of unconnected sockets'
        calls; their fallback is loaded instead). Anything else, or a second refusal of the
        same, is the caller's error."""
        loaded = set(self.loaded_names())
        for _ in range(3):
            if self.functions_why is None and set(FUNCTION_PROGRAMS) & loaded & set(self.refused):
                self.functions_why = (f"this kernel refused the fexit programs ({exc}): udp calls come from the "
                                      "system calls instead, about 3% more CPU per byte")  # fmt: skip
            elif self.tcp_functions_why is None and self._refused_tcp_functions(loaded):
                self.tcp_functions_why = (f"this kernel refused the fexit programs ({exc}): TCP sockets attributed at "
                                          "connect/listen/close only, no tcpdebug SEND/RCVD")  # fmt: skip
            elif self.iter_why is None and ITER_PROGRAMS & loaded & set(self.refused):
                self.iter_why = f"this kernel refused the siftr-poll iterator ({exc})"
                self.failed.update(dict.fromkeys(ITER_PROGRAMS & loaded, self.iter_why))
            elif self.cgroup_why is None and CGROUP_PROGRAMS & loaded:
                self.cgroup_why = f"this kernel refused the cgroup programs ({exc})"
            else:
                raise exc
            self.close()
            try:
                self.open()
                self.configure()
                self.load()
                return
            except BpfError as again:
                exc, loaded = again, set(self.loaded_names())
        raise exc

    def _refused_tcp_functions(self, loaded: set[str]) -> bool:
        """Whether the last load refused one of the TCP functions' programs (by its variant's name)."""
        chosen = {self.choice.programs.get(n, n) for n in TCP_FUNCTION_PROGRAMS if n in loaded}
        return bool(chosen & set(self.refused))

    def __enter__(self) -> KernelSession:
        self.prepare()
        try:
            self.attach()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- queries -------------------------------------------------------------------------
    def udp_call_source(self) -> str:
        """Where this session's udp call records come from (UDP_CALL_SOURCES)."""
        return udp_call_source(self.opts, self.functions_why is None)

    def tcp_call_source(self) -> str:
        """Where this session sees TCP's send and receive calls (TCP_CALL_SOURCES)."""
        return tcp_call_source(self.tcp_functions_why is None)

    def program_names(self) -> list[str]:
        names = program_names(
            self.opts, self.cgroup_why is None, self.functions_why is None, self.tcp_functions_why is None
        )
        return [n for n in names if n not in ITER_PROGRAMS] if self.iter_why is not None else names

    def loaded_names(self) -> list[str]:
        """The programs loaded: those the providers need on tracepoints this kernel has."""
        return [name for name in self.program_names() if name not in self.absent]

    def program_infos(self) -> dict[str, libbpf.BpfProgInfo]:
        """The kernel's bpf_prog_info of every attached program."""
        infos = {}
        for name in self.loaded_names():
            if name in self.failed:
                continue
            fd = self.lib.bpf_program__fd(self._program(name))
            info = libbpf.BpfProgInfo()
            size = ctypes.c_uint32(ctypes.sizeof(info))
            if fd >= 0 and self.lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)) == 0:
                infos[name] = info
        return infos

    def program_ids(self) -> dict[str, int]:
        """Kernel program id of every attached program (bpftool prog list shows them)."""
        return {name: int(info.id) for name, info in self.program_infos().items()}

    def recursion_misses(self) -> dict[str, int]:
        """Per attached program, the runs the kernel skipped because the program was already
        running on that CPU (an interrupt hit its tracepoint again inside it): those runs made
        no event and counted nothing, so even the exact counters miss them."""
        return {name: int(info.recursion_misses) for name, info in self.program_infos().items()}

    def counters(self) -> np.ndarray:
        """Per-CPU counters: array (ncpus, 2, EV_MAX) of [generated, lost] by event type."""
        value = np.zeros((self.ncpus, 2, layout.EV_MAX), dtype="<u8")
        key = ctypes.c_uint32(0)
        ret = self.lib.bpf_map_lookup_elem(self._map_fd("counters"), ctypes.byref(key), value.ctypes.data)
        if ret < 0:
            raise BpfError(f"failed to read counters: {os.strerror(ctypes.get_errno())}")
        return value

    def skb_sampling(self) -> tuple[int, int]:
        """skb-lifecycle's exact counts, summed over CPUs: (lifetimes seen, lifetimes followed)."""
        value = np.zeros(self.ncpus, dtype=layout.dtype_of(layout.SKB_SAMPLING))
        key = ctypes.c_uint32(0)
        ret = self.lib.bpf_map_lookup_elem(self._map_fd("skb_sampling"), ctypes.byref(key), value.ctypes.data)
        if ret < 0:
            raise BpfError(f"failed to read skb_sampling: {os.strerror(ctypes.get_errno())}")
        return int(value["seen"].sum()), int(value["sampled"].sum())

    def skb_follow_counts(self) -> tuple[int, int]:
        """The kernel's answer to "may this address hold a followed lifetime?" (skb_follow,
        kmod/nettrail.h), summed: (followed lifetimes counted live, tasks with reads to
        settle). Both return to 0 once every followed lifetime has ended."""
        value = np.zeros((), dtype=layout.dtype_of(layout.SKB_FOLLOW))
        key = ctypes.c_uint32(0)
        ret = self.lib.bpf_map_lookup_elem(self._map_fd("skb_follow"), ctypes.byref(key), value.ctypes.data)
        if ret < 0:
            raise BpfError(f"failed to read skb_follow: {os.strerror(ctypes.get_errno())}")
        return int(value["n"].sum()), int(value["reads"])

    def ring_fd(self) -> int:
        """The descriptor of the events ring (a keeper holds a duplicate: collector/bpf/keeper.py)."""
        return self._map_fd("events")

    def map_size(self, name: str) -> int:
        """max_entries of one of the object's maps."""
        return int(self.lib.bpf_map__max_entries(self._map(name)))

    def flows(self) -> dict[int, np.void]:
        """The exact per-flow counters: cookie -> struct nt_flow. Most flows are in the
        flow_slots array (read through mmap, one copy), those whose slot was taken in `flows`."""
        flow = layout.dtype_of(layout.FLOW)
        if self.slots is None:
            size = self.map_size("flow_slots") * flow.itemsize
            size = -(-size // mmap.PAGESIZE) * mmap.PAGESIZE
            self.slots = mmap.mmap(self._map_fd("flow_slots"), size, mmap.MAP_SHARED, mmap.PROT_READ)
        slots = np.frombuffer(self.slots, dtype=flow).copy()
        out = {int(f["flow_cookie"]): f for f in slots[slots["flow_cookie"] != 0]}
        for key, value in self._entries("flows", np.dtype("<u8"), flow):
            out.setdefault(int(key), value)
        return out

    def drops(self) -> list[tuple[np.void, int]]:
        """The exact drop counts: (struct nt_drop_key, count)."""
        return [(k, int(v)) for k, v in self._entries("drops", layout.dtype_of(layout.DROP_KEY), np.dtype("<u8"))]

    def udp_flows(self) -> list[tuple[np.void, np.void]]:
        """Exact UDP counts per wire direction: (struct nt_udp_flow_key, struct nt_udp_flow)."""
        return self._entries("udp_flows", layout.dtype_of(layout.UDP_FLOW_KEY), layout.dtype_of(layout.UDP_FLOW))

    def ip_flows(self) -> list[tuple[np.void, np.void]]:
        """Exact ip counts per (netns, interface, direction, 5-tuple): (nt_ip_flow_key, nt_ip_flow)."""
        return self._entries("ip_flows", layout.dtype_of(layout.IP_FLOW_KEY), layout.dtype_of(layout.IP_FLOW))

    def ip_slots(self, at: list[int] | None = None) -> np.ndarray[Any, np.dtype[np.void]]:
        """A copy of ip-flows' per-CPU slots (struct nt_ip_slot), all or those at these
        indices, read through mmap: the counts of the flows holding a slot since they
        took it (not yet in ip_flows)."""
        slot = layout.dtype_of(layout.IP_SLOT)
        if not self.lib.bpf_object__find_map_by_name(self.obj, b"ip_slots"):
            return np.zeros(0 if at is None else len(at), dtype=slot)  # an object built before them
        count = self.map_size("ip_slots")
        if self.ip_slot_map is None:
            size = -(-count * slot.itemsize // mmap.PAGESIZE) * mmap.PAGESIZE
            self.ip_slot_map = mmap.mmap(self._map_fd("ip_slots"), size, mmap.MAP_SHARED, mmap.PROT_READ)
        view = np.frombuffer(self.ip_slot_map, dtype=slot, count=count)
        return view.copy() if at is None else view[at]

    def ip_flow(self, key: np.void) -> np.void | None:
        """One ip_flows entry (struct nt_ip_flow) by its key, None if there is none."""
        value = np.zeros((), dtype=layout.dtype_of(layout.IP_FLOW))
        k = np.array(key, dtype=layout.dtype_of(layout.IP_FLOW_KEY))
        if self.lib.bpf_map_lookup_elem(self._map_fd("ip_flows"), k.ctypes.data, value.ctypes.data) < 0:
            return None
        return cast(np.void, value[()])

    def _entries(self, name: str, key_type: np.dtype[Any], value_type: np.dtype[Any]) -> list[tuple[Any, Any]]:
        """Every (key, value) of a hash map, read with bpf_map_get_next_key / lookup."""
        fd = self._map_fd(name)
        out = []
        key = np.zeros((), dtype=key_type)
        nxt = np.zeros((), dtype=key_type)
        prev = None
        for _ in range(1 << 20):  # bounded: the maps hold at most 65536 entries
            if self.lib.bpf_map_get_next_key(fd, prev, nxt.ctypes.data) < 0:
                break
            key[()] = nxt[()]
            prev = key.ctypes.data
            value = np.zeros((), dtype=value_type)
            if self.lib.bpf_map_lookup_elem(fd, key.ctypes.data, value.ctypes.data) == 0:
                out.append((key[()].copy() if key_type.names else key[()], value[()]))
        return out

    # -- helpers ---------------------------------------------------------------------------
    def _program(self, tracepoint: str) -> int:
        """The program chosen for this tracepoint (its variant for this kernel's prototype)."""
        return self._find_program(self.choice.programs.get(tracepoint, tracepoint))

    def _find_program(self, name: str) -> int:
        prog = self.lib.bpf_object__find_program_by_name(self.obj, name.encode())
        if not prog:
            raise BpfError(f"{self.path.name} has no program {name}: rebuild kmod (make -C kmod)")
        return int(prog)

    def _map(self, name: str) -> int:
        m = self.lib.bpf_object__find_map_by_name(self.obj, name.encode())
        if not m:
            raise BpfError(f"{self.path.name} has no map {name}: rebuild kmod (make -C kmod)")
        return int(m)

    def _map_fd(self, name: str) -> int:
        return int(self.lib.bpf_map__fd(self._map(name)))

    def _write_config(self, data: bytes) -> None:
        rodata = 0
        m = self.lib.bpf_object__next_map(self.obj, None)
        while m:
            if (self.lib.bpf_map__name(m) or b"").endswith(b".rodata"):
                rodata = m
            m = self.lib.bpf_object__next_map(self.obj, m)
        if not rodata:
            raise BpfError(f"{self.path.name} has no .rodata map for the filters: rebuild kmod")
        size = ctypes.c_size_t(0)
        ptr = self.lib.bpf_map__initial_value(rodata, ctypes.byref(size))
        if not ptr or size.value != len(data):
            raise BpfError(
                f"{self.path.name} .rodata is {size.value} bytes, struct nt_config is {len(data)}: rebuild kmod"
            )
        ctypes.memmove(ptr, data, len(data))
