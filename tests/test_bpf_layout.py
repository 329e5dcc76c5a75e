"""The numpy layout in collector/bpf/layout.py matches kmod/nettrail.h, field by field.

Compiles a small C program against the header that prints sizeof/offsetof of every
field Python knows, and checks Python covers every byte (so a field added in C only
fails too).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from collector.bpf import layout
from collector.bpf.libbpf import BpfProgInfo

HEADER = Path(__file__).resolve().parents[1] / "kmod" / "nettrail.h"
# struct -> (its first member, a struct layout.py flattens into it): `struct nt_tcp_snapshot
# snap` of the siftr and debug bodies, `struct nt_fold fold` of the lifecycle body
NESTED = {
    "nt_siftr_body": ("snap", {name for name, _ in layout.SNAPSHOT}),
    "nt_debug_body": ("snap", {name for name, _ in layout.SNAPSHOT}),
    "nt_lifecycle_body": ("fold", {name for name, _ in layout.FOLD}),
}


def c_member(struct: str, name: str) -> str:
    member, names = NESTED.get(struct, ("", set()))
    return f"{member}.{name}" if name in names else name


def c_program() -> str:
    lines = ["#include <stdio.h>", "#include <stddef.h>", f'#include "{HEADER}"', "int main(void) {"]
    for struct, fields in layout.STRUCTS.items():
        lines.append(f'printf("{struct} . %zu %zu\\n", sizeof(struct {struct}), (size_t)0);')
        for name, _ in fields:
            m = c_member(struct, name)
            lines.append(
                f'printf("{struct} {name} %zu %zu\\n", sizeof(((struct {struct} *)0)->{m}), offsetof(struct {struct}, {m}));'
            )
    lines.append('printf("nt_event . %zu %zu\\n", sizeof(struct nt_event), offsetof(struct nt_event, state));')
    lines.append("return 0; }")
    return "\n".join(lines)


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], tuple[int, int]]:
    cc = shutil.which("clang") or shutil.which("cc")
    if cc is None:
        pytest.skip("needs a C compiler (clang) to compile kmod/nettrail.h")
    tmp = tmp_path_factory.mktemp("layout")
    (tmp / "layout.c").write_text(c_program())
    subprocess.run([cc, "-o", str(tmp / "layout"), str(tmp / "layout.c")], check=True, capture_output=True)
    out = subprocess.run([str(tmp / "layout")], check=True, capture_output=True, text=True).stdout
    result = {}
    for line in out.splitlines():
        struct, name, size, offset = line.split()
        result[(struct, name)] = (int(size), int(offset))
    return result


@pytest.mark.parametrize("struct", list(layout.STRUCTS))
def test_every_python_field_has_the_c_size_and_offset(
    struct: str, c_layout: dict[tuple[str, str], tuple[int, int]]
) -> None:
    dtype = layout.dtype_of(layout.STRUCTS[struct])
    assert dtype.itemsize == c_layout[(struct, ".")][0], f"sizeof(struct {struct})"
    for name, _ in layout.STRUCTS[struct]:
        fmt, offset = dtype.fields[name][:2]  # type: ignore[index]
        assert (fmt.itemsize, offset) == c_layout[(struct, name)], f"struct {struct}.{name}"


@pytest.mark.parametrize("struct", list(layout.STRUCTS))
def test_python_covers_every_byte_of_each_struct(struct: str) -> None:
    dtype = layout.dtype_of(layout.STRUCTS[struct])
    covered = np.zeros(dtype.itemsize, dtype=bool)
    for name in dtype.names or ():
        fmt, offset = dtype.fields[name][:2]  # type: ignore[index]
        covered[offset : offset + fmt.itemsize] = True
    assert covered.all()


def test_the_event_is_the_header_then_the_union_of_bodies(c_layout: dict[tuple[str, str], tuple[int, int]]) -> None:
    size, union_offset = c_layout[("nt_event", ".")]
    assert (size, union_offset) == (layout.EVENT_SIZE, layout.HEADER_SIZE)
    for event_type, dtype in layout.EVENT_DTYPES.items():
        assert dtype.itemsize == layout.EVENT_SIZE, layout.EVENT_NAMES[event_type]


def test_decode_event_rejects_a_wrong_size_and_an_unknown_type() -> None:
    with pytest.raises(ValueError, match=f"struct nt_event is {layout.EVENT_SIZE} bytes, got 3"):
        layout.decode_event(b"abc")
    raw = np.zeros((), dtype=layout.EVENT_DTYPE)
    raw["type"] = 99
    with pytest.raises(ValueError, match="unknown nt_event type 99"):
        layout.decode_event(raw.tobytes())


def test_the_prog_info_prefix_matches_the_system_uapi_header(tmp_path: Path) -> None:
    """libbpf.BpfProgInfo (read for program ids and skipped runs) against <linux/bpf.h>."""
    cc = shutil.which("clang") or shutil.which("cc")
    if cc is None:
        pytest.skip("needs a C compiler (clang) to compile <linux/bpf.h>")
    fields = [f[0] for f in BpfProgInfo._fields_ if len(f) == 2]  # a bitfield has no offsetof
    prints = [f'printf("{n} %zu %zu\\n", offsetof(struct bpf_prog_info, {n}), sizeof(((struct bpf_prog_info *)0)->{n}));'
              for n in fields]  # fmt: skip
    (tmp_path / "info.c").write_text(
        "\n".join(["#include <stdio.h>", "#include <stddef.h>", "#include <linux/bpf.h>", "int main(void) {"])
        + "\n".join(prints) + "return 0; }"
    )  # fmt: skip
    subprocess.run([cc, "-o", str(tmp_path / "info"), str(tmp_path / "info.c")], check=True, capture_output=True)
    out = subprocess.run([str(tmp_path / "info")], check=True, capture_output=True, text=True).stdout
    c = {name: (int(offset), int(size)) for name, offset, size in (line.split() for line in out.splitlines())}
    assert c == {n: (getattr(BpfProgInfo, n).offset, getattr(BpfProgInfo, n).size) for n in fields}
    assert ctypes.sizeof(BpfProgInfo) == c["recursion_misses"][0] + 8  # nothing after it is read
