"""ctypes binding to the system libbpf.so.1: only the calls the loader uses.

Keep in sync with the libbpf 1.x C API (libbpf.h, bpf.h, btf.h). Functions that
return a pointer report failure as NULL with errno set; functions that return an
int report failure as a negative errno. `check_ptr` / `check_int` turn both into
OSError so callers can say what failed and why.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable
from typing import Any

LIBBPF_NAMES = ("libbpf.so.1", "libbpf.so")

c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_uint32 = ctypes.c_uint32
c_size_t = ctypes.c_size_t

# libbpf_print_fn_t: int (*)(enum libbpf_print_level, const char *, va_list); see _va_copy
PRINT_FN = ctypes.CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
# One libbpf message formatted in place; longer ones get a buffer of their own length.
MESSAGE_BUFFER = 16 * 1024
# Machines whose va_list argument points to state vsnprintf advances: sizeof(va_list).
VA_LIST_STATE = {"x86_64": 24, "aarch64": 32, "s390x": 32}

u32, u64 = ctypes.c_uint32, ctypes.c_uint64


class BpfProgInfo(ctypes.Structure):
    """struct bpf_prog_info (include/uapi/linux/bpf.h) up to recursion_misses: the kernel
    fills what the caller's size covers and the struct only ever grows at its end."""

    _fields_ = [
        ("type", u32), ("id", u32), ("tag", ctypes.c_uint8 * 8), ("jited_prog_len", u32), ("xlated_prog_len", u32),
        ("jited_prog_insns", u64), ("xlated_prog_insns", u64), ("load_time", u64), ("created_by_uid", u32),
        ("nr_map_ids", u32), ("map_ids", u64), ("name", ctypes.c_char * 16), ("ifindex", u32),
        ("gpl_compatible", u32, 1), ("netns_dev", u64), ("netns_ino", u64), ("nr_jited_ksyms", u32),
        ("nr_jited_func_lens", u32), ("jited_ksyms", u64), ("jited_func_lens", u64), ("btf_id", u32),
        ("func_info_rec_size", u32), ("func_info", u64), ("nr_func_info", u32), ("nr_line_info", u32),
        ("line_info", u64), ("jited_line_info", u64), ("nr_jited_line_info", u32), ("line_info_rec_size", u32),
        ("jited_line_info_rec_size", u32), ("nr_prog_tags", u32), ("prog_tags", u64), ("run_time_ns", u64),
        ("run_cnt", u64), ("recursion_misses", u64),
    ]  # fmt: skip


class BpfMapCreateOpts(ctypes.Structure):
    """struct bpf_map_create_opts (libbpf 1.x, bpf.h); sz is its size."""

    _fields_ = [
        ("sz", c_size_t), ("btf_fd", u32), ("btf_key_type_id", u32), ("btf_value_type_id", u32),
        ("btf_vmlinux_value_type_id", u32), ("inner_map_fd", u32), ("map_flags", u32), ("map_extra", u64),
        ("numa_node", u32), ("map_ifindex", u32),
    ]  # fmt: skip


# name: (restype, argtypes)
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "bpf_object__open_file": (c_void_p, [c_char_p, c_void_p]),
    "bpf_object__load": (c_int, [c_void_p]),
    "bpf_object__close": (None, [c_void_p]),
    "bpf_object__find_program_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_object__next_program": (c_void_p, [c_void_p, c_void_p]),
    "bpf_object__find_map_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_object__next_map": (c_void_p, [c_void_p, c_void_p]),
    "bpf_program__name": (c_char_p, [c_void_p]),
    "bpf_program__set_autoload": (c_int, [c_void_p, ctypes.c_bool]),
    "bpf_program__autoload": (ctypes.c_bool, [c_void_p]),
    "bpf_program__attach": (c_void_p, [c_void_p]),
    "bpf_program__attach_cgroup": (c_void_p, [c_void_p, c_int]),
    "bpf_program__attach_iter": (c_void_p, [c_void_p, c_void_p]),
    "bpf_link__fd": (c_int, [c_void_p]),
    "bpf_iter_create": (c_int, [c_int]),
    "bpf_program__fd": (c_int, [c_void_p]),
    "bpf_link__destroy": (c_int, [c_void_p]),
    "bpf_map__name": (c_char_p, [c_void_p]),
    "bpf_map__fd": (c_int, [c_void_p]),
    "bpf_map__initial_value": (c_void_p, [c_void_p, ctypes.POINTER(c_size_t)]),
    "bpf_map__set_initial_value": (c_int, [c_void_p, c_void_p, c_size_t]),
    "bpf_map__set_max_entries": (c_int, [c_void_p, c_uint32]),
    "bpf_map__max_entries": (c_uint32, [c_void_p]),
    "bpf_map__reuse_fd": (c_int, [c_void_p, c_int]),
    "bpf_map_create": (c_int, [c_int, c_char_p, c_uint32, c_uint32, c_uint32, c_void_p]),
    "bpf_map_lookup_elem": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_update_elem": (c_int, [c_int, c_void_p, c_void_p, ctypes.c_uint64]),
    "bpf_map_get_next_key": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_obj_get_info_by_fd": (c_int, [c_int, c_void_p, ctypes.POINTER(c_uint32)]),
    "libbpf_num_possible_cpus": (c_int, []),
    "libbpf_set_print": (c_void_p, [PRINT_FN]),
    "btf__load_vmlinux_btf": (c_void_p, []),
    "btf__free": (None, [c_void_p]),
    "btf__find_by_name_kind": (c_int, [c_void_p, c_char_p, c_uint32]),
    "btf__type_by_id": (c_void_p, [c_void_p, c_uint32]),
    "btf__name_by_offset": (c_char_p, [c_void_p, c_uint32]),
}


class Libbpf:
    """The loaded library with typed functions; one instance per process (see `get`)."""

    def __init__(self, path: str | None = None) -> None:
        self.lib = _open(path)
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(self.lib, name)
            fn.restype = restype
            fn.argtypes = argtypes
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._libc.vsnprintf.restype = c_int
        self._libc.vsnprintf.argtypes = [c_void_p, c_size_t, c_char_p, c_void_p]
        self._buf = ctypes.create_string_buffer(MESSAGE_BUFFER)  # reused by every message
        self.messages: list[str] = []
        self._printer = PRINT_FN(self._collect)  # kept alive: libbpf holds the pointer
        self.lib.libbpf_set_print(self._printer)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return getattr(self.lib, name)  # type: ignore[no-any-return]

    def _collect(self, level: int, fmt: bytes, args: int | None) -> int:
        # libbpf logs warnings and the verifier log here; keep the tail for error messages.
        self.messages.append(self.format(fmt, args))
        del self.messages[:-200]
        return 0

    def format(self, fmt: bytes, args: int | None) -> str:
        """printf-format one libbpf message with vsnprintf and the va_list it was given.

        Into the reused buffer; a longer message (a verifier log is one "%s" of up to
        16 MiB, its verdict at the end) is formatted once more into a buffer of exactly
        its length, from a copy of the va_list taken first (see _va_copy)."""
        saved = _va_copy(args)
        n = self._libc.vsnprintf(self._buf, len(self._buf), fmt, args)
        if n < len(self._buf):
            return self._buf.value.decode(errors="replace") if n >= 0 else fmt.decode(errors="replace")
        whole = ctypes.create_string_buffer(n + 1)
        self._libc.vsnprintf(whole, n + 1, fmt, saved)
        return whole.value.decode(errors="replace")

    def take_messages(self) -> list[str]:
        out, self.messages = self.messages, []
        return out


def _va_copy(args: int | None) -> Any:
    """va_copy(3) of the va_list a libbpf_print_fn_t receives, as vsnprintf's argument.

    ctypes has no va_list type; what the callback receives and vsnprintf takes is one
    pointer-sized argument on every ABI: x86-64 and s390x define va_list as a
    one-element array of a struct (it decays to a pointer to the caller's va_list),
    arm64 passes its 32-byte va_list struct by reference (AAPCS64: a composite over 16
    bytes goes as a pointer to a copy), and ppc64le, riscv64, mips and 32-bit ARM
    pass va_list as the pointer into the arguments itself. vsnprintf advances the
    pointed-to state in the first group, so a copy of the struct (what va_copy does
    there) is taken to format again; in the second the pointer is passed by value and
    can simply be passed again."""
    size = VA_LIST_STATE.get(os.uname().machine)
    if args is None or size is None:
        return args
    return ctypes.create_string_buffer(ctypes.string_at(args, size), size)


def _open(path: str | None) -> ctypes.CDLL:
    candidates = [path] if path else [*LIBBPF_NAMES, ctypes.util.find_library("bpf")]
    for name in candidates:
        if not name:
            continue
        try:
            return ctypes.CDLL(name, use_errno=True)
        except OSError:
            continue
    raise OSError("libbpf.so.1 not found: apt-get install libbpf1 (or libbpf-dev)")


_instance: Libbpf | None = None


def get() -> Libbpf:
    global _instance
    if _instance is None:
        _instance = Libbpf()
    return _instance


def check_ptr(ptr: int | None, what: str) -> int:
    """A libbpf pointer result, or OSError(errno, what) when it is NULL."""
    if not ptr:
        err = ctypes.get_errno() or 22
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ptr


def check_int(ret: int, what: str) -> int:
    if ret < 0:
        raise OSError(-ret, f"{what}: {os.strerror(-ret)}")
    return ret
