"""collector/bpf/ordering.py: the ring positions' acquire loads and release stores.

The memory-ordering side is an argument (the module's docstring), not something a test
on one machine can show; what is checked is that the values go through whole, through
libatomic and through the plain x86 fallback, and that a weakly ordered machine without
libatomic refuses to start instead of reading the ring unordered.
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
import pytest

from collector.bpf import ordering

# A u64 with every byte different and the top bit set: a torn or sign-extended access
# changes it.
VALUE = 0x8877_6655_4433_2211


class Uname(NamedTuple):
    machine: str


def test_libatomic_is_found_here() -> None:
    assert ordering.Fences().atomics is not None


@pytest.mark.parametrize("with_libatomic", [True, False])
def test_a_position_goes_through_whole(with_libatomic: bool) -> None:
    fences = ordering.Fences()
    if not with_libatomic:
        fences.atomics = None
    word = np.zeros(1, dtype=np.uint64)
    pos = fences.word(word)

    pos.store_release(VALUE)
    assert int(word[0]) == VALUE
    word[0] = VALUE - 1
    assert pos.load_acquire() == VALUE - 1
    fences.acquire()


def test_a_weakly_ordered_machine_without_libatomic_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ordering, "_open_libatomic", lambda: None)
    monkeypatch.setattr(os, "uname", lambda: Uname("aarch64"))
    with pytest.raises(ordering.OrderingError) as err:
        ordering.Fences()
    assert str(err.value) == "libatomic.so.1 not found: apt-get install libatomic1 (needed to read the ring on aarch64)"


def test_x86_without_libatomic_reads_the_ring_with_plain_accesses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ordering, "_open_libatomic", lambda: None)
    monkeypatch.setattr(os, "uname", lambda: Uname("x86_64"))
    assert ordering.Fences().atomics is None
