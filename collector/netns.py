"""The host's network namespaces, found the one way every part of the collector finds them:
each one a process is in (/proc/PID/ns/net) and each one named under /run/netns (it may
hold sockets no process has). siftr-poll (collector/bpf/poll.py) enters each to run its
iterator; the stack counters (collector/stack_counters.py) read each one's MIB files.

A namespace that only a file descriptor or a bind mount elsewhere keeps alive is found
by neither way: it is found once a process enters it or it is named.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

CLONE_NEWNET = 0x40000000
NAMED_NETNS = "/run/netns"
HOME = "/proc/thread-self/ns/net"  # the calling thread's own namespace

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True, slots=True)
class Netns:
    """One network namespace: its inode, its name under /run/netns (None: unnamed) and
    the processes in it (lowest first; empty: a named namespace no process is in)."""

    inode: int
    name: str | None = None
    pids: tuple[int, ...] = ()
    proc: str = "/proc"

    @property
    def path(self) -> str:
        """A path that enters it: its name, else its first process's."""
        if self.name is not None:
            return os.path.join(NAMED_NETNS, self.name)
        return f"{self.proc}/{self.pids[0]}/ns/net"


def setns(fd: int) -> None:
    """Move the calling thread into the network namespace open at `fd`."""
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def netns_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None  # gone meanwhile, or not ours to see


def scan(proc: str = "/proc", named: str = NAMED_NETNS) -> dict[int, Netns]:
    """Network namespace inode -> the namespace, with its name and its processes."""
    names: dict[int, str] = {}
    for name in sorted(_listdir(named)):
        inode = netns_inode(os.path.join(named, name))
        if inode is not None:
            names.setdefault(inode, name)
    pids: dict[int, list[int]] = {}
    for pid in sorted(int(p) for p in _listdir(proc) if p.isdigit()):
        inode = netns_inode(f"{proc}/{pid}/ns/net")
        if inode is not None:
            pids.setdefault(inode, []).append(pid)
    found = {inode: Netns(inode, name, tuple(pids.pop(inode, ())), proc) for inode, name in names.items()}
    found.update((inode, Netns(inode, None, tuple(p), proc)) for inode, p in pids.items())
    return found


@contextmanager
def entered(path: str, inode: int) -> Iterator[bool]:
    """The calling thread in the namespace at `path` while the block runs, then home again;
    yields False (and enters nothing) when `path` is no longer namespace `inode`."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if os.fstat(fd).st_ino != inode:
            yield False  # the process left it (or the pid was reused) since the scan
            return
        home = os.open(HOME, os.O_RDONLY | os.O_CLOEXEC)
        try:
            setns(fd)
            try:
                yield True
            finally:
                try:
                    setns(home)
                except OSError as exc:  # never go on in another namespace: the thread's sockets would be there
                    raise RuntimeError(f"could not return to the collector's own network namespace: {exc}") from exc
        finally:
            os.close(home)
    finally:
        os.close(fd)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
