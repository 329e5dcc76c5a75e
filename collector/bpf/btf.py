"""What the running kernel's BTF says: enum names, tracepoint prototypes, kfuncs, struct fields.

Enum numbers shift between kernel versions, so names are read at run time, never
hard-coded. The loader also asks, before it loads anything, how many arguments a
tracepoint passes (``btf_trace_<name>``: 6.1's tcp_retransmit_skb has 2, 6.13's 3), whether
a kfunc exists (bpf_rdonly_cast: 6.2+) and whether a struct has a field, to pick each
program's variant (collector/bpf/variants.py), and where per-CPU variables lie (the
preempt count, for in_task()). Keep in sync with the BTF type layout of linux/btf.h
(struct btf_type, struct btf_enum, struct btf_enum64, struct btf_member, struct
btf_var_secinfo).
"""

from __future__ import annotations

import ctypes
import functools

from collector.bpf import kallsyms, libbpf

BTF_KIND_PTR = 2
BTF_KIND_STRUCT = 4
BTF_KIND_UNION = 5
BTF_KIND_ENUM = 6
BTF_KIND_TYPEDEF = 8
BTF_KIND_FUNC = 12
BTF_KIND_FUNC_PROTO = 13
BTF_KIND_VAR = 14
BTF_KIND_DATASEC = 15
BTF_KIND_ENUM64 = 19
PERCPU_SECTION = ".data..percpu"


class _BtfType(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32), ("size", ctypes.c_uint32)]


@functools.cache
def enum_values(name: str, strip_prefix: str = "") -> dict[int, str]:
    """value -> name of a kernel enum; empty when BTF or the enum is unavailable."""
    btf = _vmlinux()
    return _read_enum(libbpf.get(), btf, name, strip_prefix) if btf else {}


def _read_enum(lib: libbpf.Libbpf, btf: int, name: str, strip_prefix: str) -> dict[int, str]:
    for kind in (BTF_KIND_ENUM, BTF_KIND_ENUM64):
        type_id = lib.btf__find_by_name_kind(btf, name.encode(), kind)
        if type_id > 0:
            break
    else:
        return {}
    ptr = lib.btf__type_by_id(btf, type_id)
    t = _BtfType.from_address(ptr)
    vlen = t.info & 0xFFFF
    entry_size = 8 if kind == BTF_KIND_ENUM else 12
    base = ptr + ctypes.sizeof(_BtfType)
    out: dict[int, str] = {}
    for i in range(vlen):
        name_off = ctypes.c_uint32.from_address(base + i * entry_size).value
        value = ctypes.c_int32.from_address(base + i * entry_size + 4).value
        if kind == BTF_KIND_ENUM64:
            value = ctypes.c_uint32.from_address(base + i * entry_size + 4).value
            value |= ctypes.c_uint32.from_address(base + i * entry_size + 8).value << 32
        text = (lib.btf__name_by_offset(btf, name_off) or b"").decode()
        out[value] = text.removeprefix(strip_prefix)
    return out


def drop_reasons() -> dict[int, str]:
    """enum skb_drop_reason: value -> name without the SKB_DROP_REASON_ prefix."""
    return enum_values("skb_drop_reason", "SKB_DROP_REASON_")


def rst_reasons() -> dict[int, str]:
    """enum sk_rst_reason: value -> name without the SK_RST_REASON_ prefix."""
    return enum_values("sk_rst_reason", "SK_RST_REASON_")


@functools.cache
def _vmlinux() -> int:
    """The kernel's BTF, parsed once per process (0 when the kernel has none); kept for the
    process's life: every query below is answered from it before the object loads."""
    return int(libbpf.get().btf__load_vmlinux_btf() or 0)


def _kind(t: _BtfType) -> int:
    return int(t.info >> 24) & 0x1F


@functools.cache
def tracepoint_args(name: str) -> int | None:
    """Arguments a tp_btf program on this tracepoint gets (None: no btf_trace_<name>). The
    typedef is a pointer to a prototype whose first parameter is the tracepoint's private
    data, not passed to the program."""
    lib, btf = libbpf.get(), _vmlinux()
    if not btf:
        return None
    type_id = lib.btf__find_by_name_kind(btf, f"btf_trace_{name}".encode(), BTF_KIND_TYPEDEF)
    for _ in range(4):  # typedef -> pointer -> prototype (no deeper chain exists)
        if type_id <= 0:
            return None
        t = _BtfType.from_address(lib.btf__type_by_id(btf, type_id))
        if _kind(t) == BTF_KIND_FUNC_PROTO:
            return max(0, int(t.info & 0xFFFF) - 1)
        type_id = t.size  # size/type union: the referenced type of a typedef or pointer
    return None


@functools.cache
def kfunc_exists(name: str) -> bool:
    """Whether the kernel exports this kfunc (a BTF FUNC of that name in vmlinux)."""
    btf = _vmlinux()
    return bool(btf) and libbpf.get().btf__find_by_name_kind(btf, name.encode(), BTF_KIND_FUNC) > 0


@functools.cache
def func_args(name: str) -> int | None:
    """Parameters of the kernel function `name` (None: no BTF FUNC of that name), for a
    fexit program, which must declare exactly these before the return value."""
    lib, btf = libbpf.get(), _vmlinux()
    type_id = lib.btf__find_by_name_kind(btf, name.encode(), BTF_KIND_FUNC) if btf else -1
    if type_id <= 0:
        return None
    proto = _BtfType.from_address(lib.btf__type_by_id(btf, type_id)).size  # a FUNC's type: its prototype
    return int(_BtfType.from_address(lib.btf__type_by_id(btf, proto)).info & 0xFFFF)


@functools.cache
def has_member(struct: str, member: str) -> bool:
    """Whether ``struct <struct>`` has a direct member of that name."""
    lib, btf = libbpf.get(), _vmlinux()
    type_id = lib.btf__find_by_name_kind(btf, struct.encode(), BTF_KIND_STRUCT) if btf else -1
    return type_id > 0 and any(name == member for name, _, _ in _members(lib, btf, type_id))


@functools.cache
def member_offset(aggregate: str, member: str) -> int | None:
    """Byte offset of a member of the struct or union named <aggregate>, looked for in
    anonymous members too (6.2-6.14's struct pcpu_hot keeps preempt_count in an anonymous
    struct inside an anonymous union); None when there is no such member."""
    lib, btf = libbpf.get(), _vmlinux()
    for kind in (BTF_KIND_STRUCT, BTF_KIND_UNION):
        type_id = lib.btf__find_by_name_kind(btf, aggregate.encode(), kind) if btf else -1
        bits = _member_bits(lib, btf, type_id, member) if type_id > 0 else None
        if bits is not None:
            return bits // 8
    return None


def _member_bits(lib: libbpf.Libbpf, btf: int, type_id: int, member: str) -> int | None:
    for name, member_type, bits in _members(lib, btf, type_id):
        if name == member:
            return bits
        if not name:  # an anonymous struct or union: its members are the outer one's
            inner = _member_bits(lib, btf, member_type, member)
            if inner is not None:
                return bits + inner
    return None


def _members(lib: libbpf.Libbpf, btf: int, type_id: int) -> list[tuple[str, int, int]]:
    """(name, type id, bit offset) of a struct's or union's members (struct btf_member:
    name_off, type, offset; with the kind flag set the offset's low 24 bits are the bit offset)."""
    ptr = lib.btf__type_by_id(btf, type_id)
    t = _BtfType.from_address(ptr)
    if _kind(t) not in (BTF_KIND_STRUCT, BTF_KIND_UNION):
        return []
    kind_flag = t.info >> 31
    base = ptr + ctypes.sizeof(_BtfType)
    out = []
    for i in range(t.info & 0xFFFF):
        name_off, member_type, offset = (ctypes.c_uint32.from_address(base + i * 12 + k).value for k in (0, 4, 8))
        name = (lib.btf__name_by_offset(btf, name_off) or b"").decode()
        out.append((name, member_type, offset & 0xFFFFFF if kind_flag else offset))
    return out


@functools.cache
def percpu_offset(var: str) -> int | None:
    """Offset of a per-CPU variable in the kernel's per-CPU section, from the section's
    BTF (DATASEC .data..percpu, written by pahole for every per-CPU variable): the same
    distance apart in every CPU's copy. None when BTF does not list it."""
    lib, btf = libbpf.get(), _vmlinux()
    if not btf:
        return None
    var_id = lib.btf__find_by_name_kind(btf, var.encode(), BTF_KIND_VAR)
    sec_id = lib.btf__find_by_name_kind(btf, PERCPU_SECTION.encode(), BTF_KIND_DATASEC)
    if var_id <= 0 or sec_id <= 0:
        return None
    ptr = lib.btf__type_by_id(btf, sec_id)
    base = ptr + ctypes.sizeof(_BtfType)
    for i in range(_BtfType.from_address(ptr).info & 0xFFFF):  # struct btf_var_secinfo: type, offset, size
        if ctypes.c_uint32.from_address(base + i * 12).value == var_id:
            return ctypes.c_uint32.from_address(base + i * 12 + 4).value
    return None


@functools.cache
def preempt_count_from_runqueue() -> int | None:
    """Where this CPU's preempt count is, as a byte offset from this CPU's runqueue
    (struct rq, the per-CPU variable `runqueues`), for x86 kernels whose kallsyms lacks
    per-CPU data (no CONFIG_KALLSYMS_ALL), where a program cannot name the variable
    (core_fixes.bpf.h, in_task()). A program reaches its CPU's runqueue through
    current->se.cfs_rq->rq (CONFIG_FAIR_GROUP_SCHED); both variables are in the same
    per-CPU area, so their distance is their distance in the section (from kallsyms where
    BTF lists no per-CPU variable, as Debian 11's 5.10's does not). None when the
    kernel lacks any of it: __preempt_count (up to 6.1, and from 6.15) or
    pcpu_hot.preempt_count (6.2-6.14), runqueues, sched_entity.cfs_rq, cfs_rq.rq, rq.cpu."""
    runqueues = percpu_offset("runqueues")
    count = percpu_offset("__preempt_count")
    if count is None:
        hot, field = percpu_offset("pcpu_hot"), member_offset("pcpu_hot", "preempt_count")
        count = None if hot is None or field is None else hot + field
    if runqueues is None and count is None:  # no per-CPU variable in BTF (5.10): from kallsyms
        found = kallsyms.percpu_offsets(("runqueues", "__preempt_count"))
        runqueues, count = found.get("runqueues"), found.get("__preempt_count")
    links = has_member("sched_entity", "cfs_rq") and has_member("cfs_rq", "rq") and has_member("rq", "cpu")
    if runqueues is None or count is None or not links or count == runqueues:
        return None
    return count - runqueues
