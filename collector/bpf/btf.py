"""Enum names from the running kernel's BTF (skb_drop_reason, sk_rst_reason, ...).

Enum numbers shift between kernel versions, so names are read at run time, never
hard-coded. Keep in sync with the BTF type layout of linux/btf.h (struct btf_type,
struct btf_enum, struct btf_enum64).
"""

from __future__ import annotations

import ctypes
import functools

from collector.bpf import libbpf

BTF_KIND_ENUM = 6
BTF_KIND_ENUM64 = 19


class _BtfType(ctypes.Structure):
    _fields_ = [("name_off", ctypes.c_uint32), ("info", ctypes.c_uint32), ("size", ctypes.c_uint32)]


@functools.cache
def enum_values(name: str, strip_prefix: str = "") -> dict[int, str]:
    """value -> name of a kernel enum; empty when BTF or the enum is unavailable."""
    lib = libbpf.get()
    btf = lib.btf__load_vmlinux_btf()
    if not btf:
        return {}
    try:
        return _read_enum(lib, btf, name, strip_prefix)
    finally:
        lib.btf__free(btf)


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
