"""Kernel addresses -> "function+0xoffset" through /proc/kallsyms (drop locations).

Read once, on first use; needs root (kptr_restrict shows zeros to others, and then
nothing is symbolised). Keep in sync with the format of /proc/kallsyms
("<hex address> <type> <name> [module]").
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from pathlib import Path

KALLSYMS = Path("/proc/kallsyms")
TEXT_TYPES = frozenset("tTwW")


class Kallsyms:
    def __init__(self, path: Path = KALLSYMS) -> None:
        entries: list[tuple[int, str]] = []
        try:
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3 and parts[1] in TEXT_TYPES:
                        address = int(parts[0], 16)
                        if address:
                            entries.append((address, parts[2]))
        except OSError:
            pass
        entries.sort()
        self.addresses = [a for a, _ in entries]
        self.names = [n for _, n in entries]
        self.cache: dict[int, str | None] = {}

    def symbolize(self, address: int) -> str | None:
        """'udp_queue_rcv_one_skb+0x1f4', or None when unknown (or kallsyms hidden)."""
        if not address or not self.addresses:
            return None
        found = self.cache.get(address, "")
        if found == "":
            i = bisect.bisect_right(self.addresses, address) - 1
            found = f"{self.names[i]}+{address - self.addresses[i]:#x}" if i >= 0 else None
            self.cache[address] = found
        return found


@functools.cache
def kernel_symbols() -> Kallsyms:
    return Kallsyms()


def percpu_offsets(names: Iterable[str], path: Path = KALLSYMS) -> dict[str, int]:
    """Offsets of per-CPU variables in the per-CPU section, from kallsyms: on x86-64 that
    section is linked at 0, so a per-CPU symbol's address is its offset, and kallsyms lists
    them where the kernel has CONFIG_KALLSYMS_ALL (Debian's do). For kernels whose BTF lists
    no per-CPU variable (Debian 11's 5.10); a name not listed, or shown as 0 (kptr_restrict),
    is left out."""
    wanted, found = set(names), {}
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[2] in wanted and int(parts[0], 16):
                    found[parts[2]] = int(parts[0], 16)
    except OSError:
        pass
    return found
