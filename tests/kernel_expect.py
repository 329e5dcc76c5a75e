"""What each kernel gives, pinned by its release: the kernel tests' expectations where the
kernel decides (issue 32). A test asks this module, not the loader, what it must see, so an
unexpected fallback or degradation on a kernel fails instead of being accepted.

The kernels the matrix boots (tests/kernel_matrix.py) are pinned by name: Debian 11's 5.10,
Debian 12's 6.1 and 6.12; any other kernel (this machine's 6.18) by what it is measured to
refuse here, each probe independent of the loader (``fexit_refused``).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import re

from collector.bpf import btf, libbpf, variants

DEBIAN_11 = (5, 10)
DEBIAN_12 = ((6, 1), (6, 12))


def release(name: str | None = None) -> tuple[int, int]:
    """(major, minor) of the running kernel (or of `name`)."""
    found = re.match(r"(\d+)\.(\d+)", name if name is not None else os.uname().release)
    assert found, f"unreadable kernel release {name or os.uname().release!r}"
    return int(found[1]), int(found[2])


RELEASE = release()

# kfree_skb passes a drop reason from 5.17: before, every drop's reason is NOT_SPECIFIED
# (kmod/skb.bpf.c, kfree_skb__2), never a reason made up for it
DROP_REASONS = RELEASE >= (5, 17)
# kfree_skb passes rx_sk, the receiving socket, from 6.11 (6.12 does, 6.1 not): before, an
# incoming segment's drop has no socket
DROP_RX_SK = RELEASE >= (6, 11)
# tcp_send_reset fires for a reset sent without a socket (a closed port's answer) from 6.10,
# with its reason (6.12 does, 6.1 and 5.10 not)
RESETS_WITHOUT_SOCKET = RELEASE >= (6, 10)
# the object: bpf_rdonly_cast from 6.2, atomic fetch from 5.12 (collector/bpf/variants.py)
OBJECT = (
    "nettrail.bpf.o"
    if RELEASE >= (6, 2)
    else "nettrail-compat.bpf.o"
    if RELEASE >= (5, 12)
    else "nettrail-legacy.bpf.o"
)
# tcp_cong_state_set: 6.1 has it, Debian 11's 5.10 not (none between is booted here): without it
# no congestion-state records
CONG_STATE_RECORDS = RELEASE >= (6, 1)
# socket storage in tracing programs (bpf_sk_storage_get) came with 5.11: --tcp-fold before is off
FOLD = RELEASE >= (5, 11)
FOLD_OFF = "socket storage in tracing programs (bpf_sk_storage_get) came with Linux 5.11"
# the socket tracepoints sock_send_length/sock_recv_length came with 6.3
SOCKET_TRACEPOINTS = RELEASE >= (6, 3)


def drop_reason(name: str) -> str:
    """The reason a drop the kernel calls `name` (5.17+) carries on this kernel."""
    return name if DROP_REASONS else "NOT_SPECIFIED"


# bpf_attr of BPF_PROG_LOAD up to attach_btf_id (the ABI is append-only)
class _ProgLoad(ctypes.Structure):
    _fields_ = [
        ("prog_type", ctypes.c_uint32),
        ("insn_cnt", ctypes.c_uint32),
        ("insns", ctypes.c_uint64),
        ("license", ctypes.c_uint64),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_uint64),
        ("kern_version", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_name", ctypes.c_char * 16),
        ("prog_ifindex", ctypes.c_uint32),
        ("expected_attach_type", ctypes.c_uint32),
        ("prog_btf_fd", ctypes.c_uint32),
        ("func_info_rec_size", ctypes.c_uint32),
        ("func_info", ctypes.c_uint64),
        ("func_info_cnt", ctypes.c_uint32),
        ("line_info_rec_size", ctypes.c_uint32),
        ("line_info", ctypes.c_uint64),
        ("line_info_cnt", ctypes.c_uint32),
        ("attach_btf_id", ctypes.c_uint32),
        ("attach_prog_fd", ctypes.c_uint32),
        ("_pad", ctypes.c_uint32),
    ]


class _RawTpOpen(ctypes.Structure):
    _fields_ = [("name", ctypes.c_uint64), ("prog_fd", ctypes.c_uint32), ("_pad", ctypes.c_uint32)]


SYS_BPF = 321  # x86-64
BPF_PROG_LOAD, BPF_RAW_TRACEPOINT_OPEN = 5, 17
BPF_PROG_TYPE_TRACING, BPF_TRACE_FEXIT = 26, 25


@functools.cache
def fexit_refused(function: str = "udp_sendmsg") -> str | None:
    """Why this kernel refuses a fexit program on `function` (None: it loads and attaches).
    The smallest such program (return 0), loaded and attached with the bpf system call
    itself, nothing of kmod/ or the loader: what the kernel does with fexit, not what the
    collector made of it. This machine's 6.18 refuses it at load (EPERM)."""
    vmlinux = libbpf.get().btf__load_vmlinux_btf()
    type_id = libbpf.get().btf__find_by_name_kind(vmlinux, function.encode(), btf.BTF_KIND_FUNC) if vmlinux else -1
    if type_id <= 0:
        return f"no BTF function {function}"
    insns = (ctypes.c_uint64 * 2)(0xB7, 0x95)  # r0 = 0; exit
    license_ = ctypes.c_char_p(b"GPL")
    attr = _ProgLoad(
        prog_type=BPF_PROG_TYPE_TRACING,
        insn_cnt=2,
        insns=ctypes.addressof(insns),
        license=ctypes.cast(license_, ctypes.c_void_p).value or 0,
        prog_name=b"nt_fexit_probe",
        expected_attach_type=BPF_TRACE_FEXIT,
        attach_btf_id=type_id,
    )
    libc = ctypes.CDLL(None, use_errno=True)
    fd = int(libc.syscall(SYS_BPF, BPF_PROG_LOAD, ctypes.byref(attr), ctypes.sizeof(attr)))
    if fd < 0:
        err = ctypes.get_errno()
        return f"load: {errno.errorcode.get(err, err)}"
    try:
        link = _RawTpOpen(name=0, prog_fd=fd)
        lfd = int(libc.syscall(SYS_BPF, BPF_RAW_TRACEPOINT_OPEN, ctypes.byref(link), ctypes.sizeof(link)))
        if lfd < 0:
            err = ctypes.get_errno()
            return f"attach: {errno.errorcode.get(err, err)}"
        os.close(lfd)
        return None
    finally:
        os.close(fd)


def udp_call_source(asked: str | None = None) -> str:
    """Where udp call records come from here when `asked` (None: the default; "none": the
    socket tracepoints asked for before 6.3, which gives nothing). The UDP functions' exits
    (fexit with 6.1's prototypes, kmod/udp_functions.bpf.c) on stock Debian 12's 6.1 and
    6.12; not on 5.10, whose udp_recvmsg has six parameters; elsewhere where the kernel
    takes fexit (fexit_refused) and has 6.1's prototypes."""
    if asked == "socket tracepoints" or (asked is None and SOCKET_TRACEPOINTS):
        return "socket tracepoints" if SOCKET_TRACEPOINTS else "none"
    if asked == "system calls":
        return asked
    if RELEASE in DEBIAN_12:
        return "kernel functions"
    if RELEASE == DEBIAN_11:
        return "system calls"
    # the parameters kmod/udp_functions.bpf.c declares
    declared = all(btf.func_args(f) == n for f, n in variants.UDP_FUNCTION_ARGS.items())
    return "kernel functions" if declared and fexit_refused() is None else "system calls"
