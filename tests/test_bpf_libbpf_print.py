"""libbpf's messages are formatted by vsnprintf with the va_list libbpf passes.

A message reaches collector/bpf/libbpf.py's print callback as a format and a va_list;
it is formatted into a reused 16 KiB buffer, and one longer than that (a verifier log)
once more into a buffer of its own length, from a copy of the va_list.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from collector.bpf import libbpf

MISSING = "/nonexistent/nettrail-test/" + "x" * 40 + ".bpf.o"
EXPECTED = [
    f"libbpf: loading object from {MISSING}\n",
    f"libbpf: elf: failed to open {MISSING}: No such file or directory\n",
]


@pytest.fixture
def restore_printer() -> Iterator[None]:
    """A second Libbpf() takes over libbpf's one print callback: give it back after."""
    yield
    shared = libbpf.get()
    shared.lib.libbpf_set_print(shared._printer)


def messages_of_a_failed_open(lib: libbpf.Libbpf) -> list[str]:
    lib.take_messages()
    assert not lib.bpf_object__open_file(MISSING.encode(), None)
    return lib.take_messages()


def test_a_message_is_formatted_with_its_arguments() -> None:
    try:
        lib = libbpf.get()
    except OSError as e:
        pytest.skip(str(e))
    assert messages_of_a_failed_open(lib) == EXPECTED


def test_a_message_longer_than_the_buffer_is_formatted_whole(
    monkeypatch: pytest.MonkeyPatch, restore_printer: None
) -> None:
    monkeypatch.setattr(libbpf, "MESSAGE_BUFFER", 16)
    try:
        lib = libbpf.Libbpf()
    except OSError as e:
        pytest.skip(str(e))
    assert len(lib._buf) == 16
    assert messages_of_a_failed_open(lib) == EXPECTED
