"""``nettrail up``'s (and ``nettrail serve``'s) directories, prepared by root without following any symlink.

The data directory belongs to the webapp's ``nettrail`` account: whatever runs as it
(a compromised webapp included) can put symlinks and hard links there, and rename what
is in it. So root, preparing it at every start:

- opens the data directory from / one component at a time with ``O_NOFOLLOW``, its
  parents checked to be root's alone (collector/private_dir.py), creates it (0750) if
  missing, and refuses one owned by another user;
- hands what is in it to the account through descriptors: directories as ``os.fwalk``
  opened them (it checks each one is what it listed, never a symlink), regular files
  opened with ``O_NOFOLLOW`` and changed only when they have one link (a hard link to
  a file elsewhere, such as /etc/shadow, is left alone); symlinks and the rest are
  skipped;
- keeps its own files (the collector's token and spool) in the collector's directory,
  ``/var/lib/nettrail-collector`` (root, 0700; $NETTRAIL_COLLECTOR_DIR), outside the
  data directory, where the account cannot even look.

Keep in sync with nettrail/commands/up.py, collector/private_dir.py and docs/webapp.md.
"""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys
from pathlib import Path

from collector.private_dir import OPEN_DIR, UnsafeDirectoryError, collector_dir, open_private_dir

TOKEN_FILE = "collector.token"  # in the collector's directory: the local token for the collector child
SPOOL_DIR = "spool"  # in the collector's directory
SOCKET_FILE = "webapp.sock"  # in the data directory: the webapp's socket for the local collector
MAX_SOCKET_PATH = 107  # sun_path's 108 bytes with the NUL
FIX = (
    # A system Python: a venv keeps pointing at the Python it was made from (a pyenv one under /root).
    "install nettrail where the {user} user can read it, e.g. `/usr/bin/python3 -m venv /opt/nettrail && "
    "/opt/nettrail/bin/pip install /path/to/nettrail`, then run `/opt/nettrail/bin/nettrail up`"
)
# The same, when a directory on the way is private: opening it is the other way out.
FIX_PRIVATE = FIX + "; or let other users through that directory: `chmod o+rx {path}`"


class WebappUnrunnable(RuntimeError):
    """The webapp user cannot run the webapp with nettrail's interpreter and packages."""


def ensure_user(name: str, home: Path) -> pwd.struct_passwd:
    """The system account `name`, created (no home, no shell) if missing."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pass
    subprocess.run(
        ["useradd", "--system", "--user-group", "--home-dir", str(home), "--no-create-home",
         "--shell", "/usr/sbin/nologin", name],
        check=True,
    )  # fmt: skip
    return pwd.getpwnam(name)


def world_traversable(path: Path) -> bool:
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents] if p.is_dir())


def prepare_data_dir(data: Path, account: pwd.struct_passwd) -> None:
    """Make (0750) or check the data directory and give it and its content to `account`.
    UnsafeDirectoryError when a parent is not root's alone, the directory is a symlink or
    belongs to another user."""
    # made where missing (the account must pass); a sticky one such as /tmp will do: only
    # root or the account may rename the data directory there, and root works on it
    # through the descriptor opened below, whatever the name points to afterwards
    parent = open_private_dir(data.parent, mode=0o755, sticky=True)
    try:
        try:
            os.mkdir(data.name, 0o750, dir_fd=parent)
        except FileExistsError:
            pass
        try:
            top = os.open(data.name, OPEN_DIR, dir_fd=parent)
        except OSError as exc:
            raise UnsafeDirectoryError(f"{data}: cannot open it as a directory without following a symlink "
                                       f"({exc.strerror})") from None  # fmt: skip
    finally:
        os.close(parent)
    try:
        owner = os.fstat(top).st_uid
        if owner not in (0, account.pw_uid):
            raise UnsafeDirectoryError(f"{data} belongs to uid {owner}, neither root nor {account.pw_name}")
        chown_tree(top, account)
    finally:
        os.close(top)


def chown_tree(top: int, account: pwd.struct_passwd) -> None:
    """Give the directory open as `top` and what is in it to `account`, through descriptors only."""
    ids = (account.pw_uid, account.pw_gid)
    for _, _, files, fd in os.fwalk(".", dir_fd=top, follow_symlinks=False):
        _fchown(fd, ids)
        for name in files:
            _chown_file(fd, name, ids)


def _fchown(fd: int, ids: tuple[int, int]) -> None:
    info = os.fstat(fd)
    if (info.st_uid, info.st_gid) != ids:
        os.fchown(fd, *ids)


def _chown_file(directory: int, name: str, ids: tuple[int, int]) -> None:
    """A regular file with one link, opened without following a symlink (a hard link's
    other names are elsewhere: its owner is not ours to change)."""
    try:
        if not stat.S_ISREG(os.stat(name, dir_fd=directory, follow_symlinks=False).st_mode):
            return  # a symlink, a socket: nothing root made
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=directory)
    except OSError:
        return  # gone, or swapped for something that is not a plain file
    try:
        info = os.fstat(fd)
        if stat.S_ISREG(info.st_mode) and info.st_nlink == 1:
            _fchown(fd, ids)
    finally:
        os.close(fd)


def prepare_collector_dir(data: Path) -> Path:
    """The collector's own directory (root, 0700), checked like a spool's; refused inside
    the data directory, which the webapp's account owns."""
    mine = collector_dir()
    if mine == data or data in mine.parents:
        raise UnsafeDirectoryError(
            f"the collector's directory {mine} is inside the data directory {data}, which the webapp's account "
            f"owns: set $NETTRAIL_COLLECTOR_DIR elsewhere"
        )
    os.close(open_private_dir(mine, mode=0o700))
    return mine


def socket_path(data: Path) -> Path:
    """The webapp's Unix socket; ValueError when the path is too long for one."""
    path = data / SOCKET_FILE
    if len(str(path).encode()) > MAX_SOCKET_PATH:
        raise ValueError(f"the webapp's socket {path} is longer than {MAX_SOCKET_PATH} bytes: "
                         "set NETTRAIL_DATA to a shorter path")  # fmt: skip
    return path


def webapp_python(account: pwd.struct_passwd) -> str:
    """This interpreter, when `account` can run it with its standard library and packages.

    Raises WebappUnrunnable naming the first directory on the way that the account
    cannot pass, and the fix. No other Python is tried: the webapp must run on the
    interpreter and packages nettrail was installed with (another one of the same
    version once ran it on the system's packages, without the channel layer's).
    """
    needed = [Path(os.path.realpath(sys.executable)).parent, Path(sys.base_prefix), Path(sys.prefix)]
    needed += [Path(p) for p in sys.path if p.startswith(sys.prefix) and p.endswith("site-packages")]
    for place in needed:
        private = _private_dir(place, account)
        if private is not None:
            mode = stat.S_IMODE(private.stat().st_mode)
            real = os.path.realpath(sys.executable)
            named = sys.executable if real == sys.executable else f"{sys.executable} (a venv of {real})"
            raise WebappUnrunnable(
                f"the {account.pw_name} user cannot run nettrail's interpreter {named}: {private} "
                f"(mode {mode:04o}, owner uid {private.stat().st_uid}) is closed to it; "
                + FIX_PRIVATE.format(user=account.pw_name, path=private)
            )
    return sys.executable


def _private_dir(path: Path, account: pwd.struct_passwd) -> Path | None:
    """The first directory from / to `path` that `account` may not pass through (search permission)."""
    for place in [*reversed(path.parents), path]:
        try:
            info = place.stat()
        except OSError:
            return place
        if info.st_uid == account.pw_uid:
            allowed = info.st_mode & stat.S_IXUSR
        elif info.st_gid == account.pw_gid:
            allowed = info.st_mode & stat.S_IXGRP
        else:
            allowed = info.st_mode & stat.S_IXOTH
        if not allowed:
            return place
    return None
