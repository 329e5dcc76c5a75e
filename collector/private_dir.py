"""Directories only the collector's own user (root, for the system collector) can change.

A root collector writes, renames and deletes files in its spool (batches, cursor,
rejected/, the held ledgers, the ring keeper's counts) and reads its token. If any
directory on the way to them could be changed by another user -- the webapp's
``nettrail`` account owns the data directory -- that user could swap a component for a
symlink and have root create, write or delete files wherever it chose. So a private
directory is opened from ``/`` one component at a time, relative to the directory
before it, with ``O_NOFOLLOW`` (a symlink anywhere on the way is refused, never
followed), and every component must be owned by root or by this process's user and be
writable by nobody else (a sticky directory such as /tmp excepted: there only a file's
owner may rename or remove it). Missing components are created (mode 0700) on the way.
Once that holds, no other user can change anything under the directory afterwards:
later path operations in it reach what was checked.

The system collector keeps its tree in ``/var/lib/nettrail-collector`` (root, 0700;
``$NETTRAIL_COLLECTOR_DIR`` elsewhere), outside the webapp's data directory: its token
file and spool. Used by collector/spool.py, nettrail/commands/up_dirs.py and
nettrail/commands/collect.py. Keep in sync with docs/collector-sinks.md.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

COLLECTOR_DIR_ENV = "NETTRAIL_COLLECTOR_DIR"
SYSTEM_COLLECTOR_DIR = Path("/var/lib/nettrail-collector")
OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeDirectoryError(ValueError):
    """A directory another user could change (or a symlink) is on the way."""


def collector_dir() -> Path:
    """The system collector's own directory: $NETTRAIL_COLLECTOR_DIR or /var/lib/nettrail-collector."""
    given = os.environ.get(COLLECTOR_DIR_ENV)
    return Path(given).expanduser().absolute() if given else SYSTEM_COLLECTOR_DIR


def open_private_dir(path: Path, mode: int = 0o700, *, sticky: bool = False) -> int:
    """A descriptor of `path`, made on the way where missing, after checking that only
    root or this user can change any directory from / to it (`path` itself may be a
    sticky one such as /tmp with `sticky`: for a parent whose children are checked in
    turn). UnsafeDirectoryError says which component is not, and why. The caller closes
    the descriptor."""
    if not path.is_absolute():
        path = Path(os.path.abspath(path))  # lexically: `..` is not resolved through a symlink
    trusted = {0, os.geteuid()}
    fd = os.open("/", OPEN_DIR)
    try:
        _check(Path("/"), os.fstat(fd), trusted, last=len(path.parts) == 1 and not sticky)
        here = Path("/")
        for index, name in enumerate(path.parts[1:], start=2):
            here = here / name
            child = _open_or_make(fd, name, here, mode)
            os.close(fd)
            fd = child
            _check(here, os.fstat(fd), trusted, last=index == len(path.parts) and not sticky)
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_private_dir(path: Path, mode: int = 0o700) -> Path:
    """`path`, checked (and made where missing) as open_private_dir does."""
    os.close(open_private_dir(path, mode))
    return path


def _open_or_make(parent: int, name: str, here: Path, mode: int) -> int:
    for attempt in range(2):
        try:
            return os.open(name, OPEN_DIR, dir_fd=parent)
        except FileNotFoundError:
            if attempt:
                raise UnsafeDirectoryError(f"{here}: made, then gone") from None
        except OSError as exc:
            if _is_symlink(parent, name):
                raise UnsafeDirectoryError(f"{here} is a symbolic link: refusing to follow it") from None
            raise UnsafeDirectoryError(f"{here}: cannot open it as a directory ({exc.strerror})") from None
        try:
            os.mkdir(name, mode, dir_fd=parent)  # never follows a symlink: one planted meanwhile is EEXIST
        except FileExistsError:
            pass  # made meanwhile: opened and checked like any other
        except OSError as exc:
            raise UnsafeDirectoryError(f"{here}: cannot create it ({exc.strerror})") from None
    raise AssertionError("unreachable")


def _is_symlink(parent: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _check(here: Path, info: os.stat_result, trusted: set[int], *, last: bool) -> None:
    if info.st_uid not in trusted:
        raise UnsafeDirectoryError(
            f"{here} is owned by uid {info.st_uid}: that user could redirect what uid {os.geteuid()} writes "
            "under it; use a directory only root (or this user) can change"
        )
    shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if shared and (last or not info.st_mode & stat.S_ISVTX):
        raise UnsafeDirectoryError(
            f"{here} (mode {stat.S_IMODE(info.st_mode):04o}) is writable by other users: they could "
            "replace what is in it; use a directory only root (or this user) can change"
        )
