"""Which program variant each tracepoint gets on the running kernel, and what that costs.

Tracepoint prototypes grow over kernel versions (tcp_retransmit_skb gained ``err``,
tcp_send_reset ``reason``, kfree_skb ``reason`` then ``rx_sk``, udp_fail_queue_rcv_skb
``skb``), and a tp_btf program declared with more arguments than the kernel passes is
rejected ("func '...' doesn't have 3-th argument"), failing the whole object. So kmod/
has one program per prototype, named ``<tracepoint>`` (the newest) or
``<tracepoint>__<N>`` (N arguments); before loading, the loader reads the running kernel's
``btf_trace_<name>`` (collector/bpf/btf.py) and enables the variant with the most
arguments the kernel passes, the others stay unloaded (bpf_program__set_autoload).

What an older prototype cannot give, and the optional tracepoints a kernel lacks, are
named as degradations (provider, field, why): in collector_status and on stderr. The
choices on the kernels nettrail is meant for (docs/collector.md, "Kernel support"):

============================  ======  ======  ======  ======  ======  =========
tracepoint                    5.10    5.15    6.1     6.8     6.12    6.18
============================  ======  ======  ======  ======  ======  =========
tcp_retransmit_skb            __2     __2     __2     __2     __2     3 (err)
tcp_send_reset                __2     __2     __2     __2     3       3
kfree_skb                     __2     __2     __3     __3     4       4
udp_fail_queue_rcv_skb        __2     __2     __2     __2     3       3
tcp_cong_state_set            absent  ?       yes     yes     yes     yes
sock_send/recv_length         absent  absent  absent  yes     yes     yes
tcp_recvmsg (fexit, < 6.3)    __6     __6     5       —       —       —
bpf_rdonly_cast (kfunc)       no      no      no      yes     yes     yes
atomic fetch/cmpxchg (5.12)   no      yes     yes     yes     yes     yes
============================  ======  ======  ======  ======  ======  =========

5.15 (Ubuntu 22.04) and 6.8 (Ubuntu 24.04) are read from their sources' prototypes, not
booted here; 5.10 (Debian 11), 6.1 and 6.12 are measured by the kernel matrix
(tests/kernel_matrix.py) and 6.18 on this machine. The object: nettrail.bpf.o with
bpf_rdonly_cast, else nettrail-compat.bpf.o, or nettrail-legacy.bpf.o without atomic fetch. Keep the
program names in sync with the SEC("tp_btf/...") programs of kmod/.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from collector.bpf import btf, libbpf

RDONLY_CAST = "bpf_rdonly_cast"
# Without the bpf_rdonly_cast kfunc (before 6.2) no program may even contain a call to it:
# the verifier rejects an unresolved kfunc call before it prunes dead code (until 6.4).
# kmod/ builds a second object with probe reads in place of the cast's direct loads.
COMPAT_OBJECT = "nettrail-compat.bpf.o"
OBJECT = "nettrail.bpf.o"
# Before 5.12 the verifier refuses any program holding an atomic fetch or compare-and-swap
# instruction, dead or not (kmod/core_fixes.bpf.h, NT_LEGACY): the compat sources built
# without them (siftr's flow slots left unused: every flow in the `flows` map).
LEGACY_OBJECT = "nettrail-legacy.bpf.o"
OBJECTS = (OBJECT, COMPAT_OBJECT, LEGACY_OBJECT)


@dataclass(frozen=True)
class Variant:
    """A program for one prototype of its tracepoint: ``args`` arguments; ``loses``: the
    (provider, field, why) it cannot fill because that prototype lacks an argument."""

    program: str
    args: int
    loses: tuple[tuple[str, str, str], ...] = ()


def _older(tp: str, args: int, *loses: tuple[str, str, str]) -> Variant:
    return Variant(f"{tp}__{args}", args, loses)


# Before 5.17 kfree_skb passes no reason and BTF has no enum skb_drop_reason: kfree_skb__2
# (kmod/skb.bpf.c) reports SKB_DROP_REASON_NOT_SPECIFIED's value for every drop, named so
# (the loader's drop_reasons): a drop says its reason is unknown, never one made up.
UNNAMED_DROP_REASONS = {2: "NOT_SPECIFIED"}
NO_DROP_REASON = "kfree_skb passes no drop reason before Linux 5.17: every drop's reason is NOT_SPECIFIED"

# Newest first: the first whose argument count the kernel passes is taken.
VARIANTS: dict[str, tuple[Variant, ...]] = {
    "tcp_retransmit_skb": (
        Variant("tcp_retransmit_skb", 3),
        _older(
            "tcp_retransmit_skb",
            2,
            ("tcp", "tcp_retransmit.err", "tracepoint tcp_retransmit_skb passes no err on this kernel: always 0"),
        ),
    ),
    "tcp_send_reset": (
        Variant("tcp_send_reset", 3),
        _older(
            "tcp_send_reset",
            2,
            ("tcp", "tcp_reset.reason", "tracepoint tcp_send_reset passes no reset reason on this kernel"),
            # the same 6.10 change made it fire without a socket too (5.10 and 6.1 in the matrix)
            (
                "tcp",
                "tcp_reset.no_socket",
                "tracepoint tcp_send_reset fires only for a socket's resets before Linux 6.10: a closed port's "
                "answer (reset-sent without a socket) is not recorded",
            ),
        ),
    ),
    "kfree_skb": (
        Variant("kfree_skb", 4),
        _older(
            "kfree_skb",
            3,
            ("skb", "skb_drop.sock", "kfree_skb passes no rx_sk: a drop is tied to skb->sk only"),
            ("skb-lifecycle", "skb_drop.sock", "kfree_skb passes no rx_sk: a drop is tied to skb->sk only"),
            (
                "tcpdebug",
                "tcp_debug.drop_sock",
                "kfree_skb passes no rx_sk: an incoming segment's drop point has no socket",
            ),
        ),
        _older(
            "kfree_skb",
            2,
            ("skb", "skb_drop.drop_reason", NO_DROP_REASON),
            ("skb-lifecycle", "skb_drop.drop_reason", NO_DROP_REASON),
            (
                "tcpdebug",
                "tcp_debug.drop",
                "kfree_skb passes no drop reason before Linux 5.17: TCP's drop points cannot be told, none is recorded",
            ),
        ),
    ),
    # a kernel function, not a tracepoint (TCP_FUNCTION_ARGS): the variant whose parameters
    # the kernel's BTF gives exactly
    "tcp_recvmsg": (Variant("tcp_recvmsg", 5), Variant("tcp_recvmsg__6", 6)),
    "udp_fail_queue_rcv_skb": (
        Variant("udp_fail_queue_rcv_skb", 3),
        _older(
            "udp_fail_queue_rcv_skb",
            2,
            ("udp", "udp_fail.truesize", "udp_fail_queue_rcv_skb passes no skb on this kernel"),
        ),
    ),
}

# Optional tracepoints whose absence costs named fields (the loader leaves their programs out).
ABSENT_LOSES: dict[str, tuple[tuple[str, str, str], ...]] = {
    # tcp_cong_state_set: 6.1 has it, Debian 11's 5.10 not: no congestion-state
    # records; a passive child is then recorded at its change out of SYN_RECV (tcp.bpf.c)
    "tcp_cong_state_set": (
        ("tcp", "tcp_cong_state", "no tcp_cong_state_set tracepoint on this kernel: no congestion-state records"),
    ),
    "sock_send_length": (
        ("udp", "udp_call.send", "no sock_send_length tracepoint (Linux 6.3+): no send call records"),
        (
            "udp-calls",
            "udp_call.send",
            "no sock_send_length tracepoint (Linux 6.3+): no send records (udp has the device's, at a "
            "program on every packet)",
        ),
        ("tcpdebug", "tcp_debug.user_send", "no sock_send_length tracepoint (Linux 6.3+): no SEND user requests"),
        ("tcp", "attribution", "no sock_send_length tracepoint: sockets attributed at connect/listen/close only"),
    ),
    "sock_recv_length": (
        ("udp", "udp_call.receive", "no sock_recv_length tracepoint (Linux 6.3+): no receive call records"),
        (
            "udp-calls",
            "udp_call.receive",
            "no sock_recv_length tracepoint (Linux 6.3+): no receive records (udp has the device's, at a "
            "program on every packet)",
        ),
        ("tcpdebug", "tcp_debug.user_rcvd", "no sock_recv_length tracepoint (Linux 6.3+): no RCVD user requests"),
        ("skb-lifecycle", "skb_lifecycle.read", "no sock_recv_length tracepoint: reads end at skb_copy_datagram_iovec"),
    ),
}


# The udp providers' call records before Linux 6.3 (no sock_send_length): at the exits of
# the UDP functions (kmod/udp_functions.bpf.c) or, where the kernel refuses those, of every
# system call (kmod/udp_syscalls.bpf.c). What each source does not see replaces the absent
# tracepoints' "no call records".
# function -> the parameters kmod/udp_functions.bpf.c declares before the return value
# (6.1's): a fexit program on another prototype would read its return value elsewhere
UDP_FUNCTION_ARGS = {"udp_sendmsg": 3, "udp_recvmsg": 5, "udpv6_sendmsg": 3, "udpv6_recvmsg": 5}
UDP_FUNCTIONS = tuple(UDP_FUNCTION_ARGS)
SYSCALL_TRACEPOINT = "sys_exit"  # raw_syscalls:sys_exit, the system calls' source's one program
FUNCTION_SOURCE_LOSES = tuple(
    (
        p,
        "udp_call",
        "calls seen at the exits of udp_sendmsg, udp_recvmsg, udpv6_sendmsg, udpv6_recvmsg (no "
        "sock_send_length before Linux 6.3): a sendfile/splice's data (the sendpage path) is not counted "
        "in the send records",
    )
    for p in ("udp", "udp-calls")
)
SYSCALL_SOURCE_LOSES = tuple(
    (
        p,
        "udp_call",
        "calls seen at the system calls sendto, sendmsg, sendmmsg, recvfrom, recvmsg, recvmmsg (no "
        "sock_send_length before Linux 6.3): datagrams moved by write/read, sendfile or io_uring, or by a "
        "32-bit process, are not recorded; a sendmmsg/recvmmsg's messages past the first 32 are counted "
        "lost; sock_cookie only where the socket already had one",
    )
    for p in ("udp", "udp-calls")
)


# TCP's send and receive calls before Linux 6.3, for attribution and tcpdebug's SEND/RCVD:
# at the exits of tcp_sendmsg / tcp_recvmsg (kmod/tcp_functions.bpf.c). function -> the
# parameter counts kmod/ has a program for (tcp_recvmsg: 5.19+, and 5.10's with nonblock).
TCP_FUNCTION_ARGS = {"tcp_sendmsg": (3,), "tcp_recvmsg": (5, 6)}
TCP_FUNCTIONS = tuple(TCP_FUNCTION_ARGS)
_TCP_UNSEEN = (
    "(no sock_send_length before Linux 6.3): calls that do not reach them are not seen, a sendfile/splice's "
    "data (tcp_sendpage, tcp_splice_read) and a kTLS or sockmap socket's calls"
)
TCP_FUNCTION_FILLS = {
    ("tcpdebug", "tcp_debug.user_send"),
    ("tcpdebug", "tcp_debug.user_rcvd"),
    ("tcp", "attribution"),
}
TCP_FUNCTION_LOSES = (
    ("tcpdebug", "tcp_debug.user", f"SEND/RCVD at the exits of tcp_sendmsg and tcp_recvmsg {_TCP_UNSEEN}"),
    ("tcp", "attribution", f"sockets attributed at the exits of tcp_sendmsg and tcp_recvmsg {_TCP_UNSEEN}"),
)


def _source_losses(tracepoints: list[str], gone: set[str]) -> tuple[set[tuple[str, str]], list[tuple[str, str, str]]]:
    """With the UDP functions or the system calls as the call records' source, and the TCP
    functions as TCP's calls': the (provider, field) of the socket tracepoints' absence these
    sources fill, and what they do not see."""
    filled: set[tuple[str, str]] = set()
    lost: list[tuple[str, str, str]] = []
    if any(tp in TCP_FUNCTIONS for tp in tracepoints):
        filled |= TCP_FUNCTION_FILLS
        lost += TCP_FUNCTION_LOSES
    udp = {(p, f) for p in ("udp", "udp-calls") for f in ("udp_call.send", "udp_call.receive")}
    if any(tp in UDP_FUNCTIONS for tp in tracepoints):
        return filled | udp, [*lost, *FUNCTION_SOURCE_LOSES]
    if SYSCALL_TRACEPOINT in tracepoints and SYSCALL_TRACEPOINT not in gone:
        return filled | udp, [*lost, *SYSCALL_SOURCE_LOSES]
    return filled, lost


# A socket filter that fetch-adds and compare-and-swaps a stack slot, then returns 0:
# (code, dst | src << 4, off, imm) of each struct bpf_insn.
_FETCH_PROBE = (
    (0xB7, 1, 0, 0),  # r1 = 0
    (0x7B, 10 | 1 << 4, -8, 0),  # *(u64 *)(r10 - 8) = r1
    (0xB7, 1, 0, 1),  # r1 = 1
    (0xDB, 10 | 1 << 4, -8, 0x01),  # r1 = atomic_fetch_add((u64 *)(r10 - 8), r1)  (BPF_ADD | BPF_FETCH)
    (0xB7, 0, 0, 0),  # r0 = 0
    (0xDB, 10 | 1 << 4, -8, 0xF1),  # r0 = cmpxchg_64(r10 - 8, r0, r1)  (BPF_CMPXCHG)
    (0xB7, 0, 0, 0),  # r0 = 0
    (0x95, 0, 0, 0),  # exit
)


class _Insn(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("regs", ctypes.c_uint8), ("off", ctypes.c_int16), ("imm", ctypes.c_int32)]


@functools.cache
def atomic_fetch() -> bool:
    """Whether this kernel's verifier takes atomic fetch and compare-and-swap instructions
    (5.12+): it loads a probe program holding both (libbpf has no probe of its own for them)."""
    insns = (_Insn * len(_FETCH_PROBE))(*(_Insn(*i) for i in _FETCH_PROBE))
    load = libbpf.get().lib.bpf_prog_load
    load.restype = ctypes.c_int
    load.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fd = int(load(1, b"nt_fetch_probe", b"GPL", insns, len(insns), None))  # BPF_PROG_TYPE_SOCKET_FILTER
    if fd >= 0:
        os.close(fd)
    # only the verifier's refusal (EINVAL) says no: without privileges (EPERM) nothing
    # loads anyway, and a plan made unprivileged (tests/test_bpf_variants.py) is not told wrong
    return fd != -errno.EINVAL


@dataclass(frozen=True)
class Choice:
    """The loader's plan for this kernel: the object, each tracepoint's program, the losses."""

    object_name: str
    programs: dict[str, str]  # tracepoint -> program name to load
    degraded: tuple[tuple[str, str, str], ...]


def choose(
    tracepoints: Iterable[str],
    absent: Iterable[str],
    providers: Iterable[str],
    args_of: Callable[[str], int | None] | None = None,
    has_kfunc: Callable[[str], bool] | None = None,
    has_fetch: Callable[[], bool] | None = None,
    func_args_of: Callable[[str], int | None] | None = None,
) -> Choice:
    """Pick the variant of each present tracepoint and collect what the chosen providers lose.
    args_of and has_kfunc default to the running kernel's BTF (another kernel's answers
    can be given: tests/test_bpf_variants.py)."""
    args_of = args_of or btf.tracepoint_args
    func_args_of = func_args_of or btf.func_args
    has_kfunc = has_kfunc or btf.kfunc_exists
    chosen = set(providers)
    gone = set(absent)
    tracepoints = list(tracepoints)
    filled, lost = _source_losses(tracepoints, gone)
    programs: dict[str, str] = {}
    for tp in tracepoints:
        if tp in gone:
            lost.extend(d for d in ABSENT_LOSES.get(tp, ()) if d[:2] not in filled)
            continue
        options = VARIANTS.get(tp)
        if not options:
            programs[tp] = tp
            continue
        if tp in TCP_FUNCTION_ARGS:  # a fexit program declares the function's parameters exactly
            have = func_args_of(tp)
            pick = next((v for v in options if v.args == have), options[0])
        else:
            have = args_of(tp)
            pick = next((v for v in options if have is None or v.args <= have), options[-1])
        programs[tp] = pick.program
        lost.extend(pick.loses)
    wanted = [d for d in dict.fromkeys(lost) if d[0] in chosen]
    return Choice(object_for(has_kfunc, has_fetch or atomic_fetch), programs, tuple(wanted))


def object_for(has_kfunc: Callable[[str], bool] | None = None, has_fetch: Callable[[], bool] | None = None) -> str:
    """The object this kernel loads: OBJECT with bpf_rdonly_cast (6.2+), else COMPAT_OBJECT,
    or LEGACY_OBJECT where the verifier takes no atomic fetch (before 5.12)."""
    if (has_kfunc or btf.kfunc_exists)(RDONLY_CAST):
        return OBJECT
    return COMPAT_OBJECT if (has_fetch or atomic_fetch)() else LEGACY_OBJECT


def by_provider(degraded: Iterable[tuple[str, str, str]]) -> dict[str, dict[str, str]]:
    """provider -> {field: why}, the collector_status form."""
    out: dict[str, dict[str, str]] = {}
    for provider, what, why in degraded:
        out.setdefault(provider, {})[what] = why
    return out
