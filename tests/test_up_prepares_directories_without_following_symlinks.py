"""`nettrail up` prepares the data directory as root without following what its account planted (issue #33, item 1).

The webapp's account owns the data directory, so it can leave symlinks (and, where
fs.protected_hardlinks is off, hard links) there for root to follow at the next start.
nettrail/commands/up_dirs.py hands the tree to the account through descriptors: these
tests plant each kind of link, with `nobody` as the account where it can do it itself,
and check that nothing outside the data directory changed owner. The end-to-end test
runs the real `nettrail up` over a data directory with a database symlinked to a
root-only file: the database step runs as the account, so it cannot open it, and the
file is untouched.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.private_dir import UnsafeDirectoryError
from nettrail.commands import up_dirs
from tests.daphne_server import readable_python
from tests.test_nettrail_up import REPO, free_port, readable_by_others, up_env

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: nettrail up prepares directories as root")
VICTIM = b"root's own bytes\n"


@pytest.fixture
def nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


@pytest.fixture
def places() -> Iterator[tuple[Path, Path]]:
    """(a scratch directory, root-only 0700, holding `victim`: root's, 0600)."""
    scratch = Path(tempfile.mkdtemp(prefix="nettrail-dirs-"))
    scratch.chmod(0o755)
    target = Path(tempfile.mkdtemp(prefix="nettrail-root-only-"))
    (target / "victim").write_bytes(VICTIM)
    (target / "victim").chmod(0o600)
    yield scratch, target
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)
    shutil.rmtree(scratch.with_name(scratch.name + "-collector"), ignore_errors=True)


def as_user(account: pwd.struct_passwd, cwd: Path, script: str) -> None:
    done = subprocess.run(
        ["sh", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=60,
        user=account.pw_uid, group=account.pw_gid, extra_groups=[],
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def owners(*paths: Path) -> list[int]:
    return [p.lstat().st_uid for p in paths]


def test_the_tree_goes_to_the_account_but_no_symlink_or_hard_link_is_followed(
    nobody: pwd.struct_passwd, places: tuple[Path, Path]
) -> None:
    scratch, target = places
    data = scratch / "data"
    (data / "sub").mkdir(parents=True)
    (data / "nettrail.sqlite3").write_bytes(b"")  # root's, as an older start's migrate left it
    (data / "sub" / "file").write_bytes(b"")
    os.chown(data, nobody.pw_uid, nobody.pw_gid)
    # the swap of a root-owned directory, and symlinks where root's files used to be
    as_user(nobody, data, f"mv sub sub.orig && ln -s {target} sub && ln -s {target}/victim collector.token")
    # A hard link needs fs.protected_hardlinks=0 for the account to make it; root makes it here.
    os.link(target / "victim", data / "hard")
    up_dirs.prepare_data_dir(data, nobody)
    kept = [data, data / "sub.orig", data / "nettrail.sqlite3", data / "sub.orig" / "file"]
    assert owners(*kept) == [nobody.pw_uid] * 4
    assert owners(target, target / "victim") == [0, 0]  # neither through the symlinks nor the hard link
    assert (target / "victim").read_bytes() == VICTIM


def test_a_data_directory_that_is_a_symlink_is_refused(nobody: pwd.struct_passwd, places: tuple[Path, Path]) -> None:
    scratch, target = places
    (scratch / "data").symlink_to(target)
    with pytest.raises(UnsafeDirectoryError, match=f"^{scratch / 'data'}: cannot open it as a directory without"):
        up_dirs.prepare_data_dir(scratch / "data", nobody)
    assert owners(target, target / "victim") == [0, 0]


def test_a_data_directory_under_one_the_account_owns_is_refused(
    nobody: pwd.struct_passwd, places: tuple[Path, Path]
) -> None:
    scratch, _ = places
    os.chown(scratch, nobody.pw_uid, nobody.pw_gid)  # it could swap `data` for a symlink at any time
    with pytest.raises(UnsafeDirectoryError, match=f"^{scratch} is owned by uid {nobody.pw_uid}: "):
        up_dirs.prepare_data_dir(scratch / "data", nobody)
    assert not (scratch / "data").exists()


def test_a_data_directory_of_a_third_user_is_refused(nobody: pwd.struct_passwd, places: tuple[Path, Path]) -> None:
    scratch, _ = places
    (scratch / "data").mkdir()
    os.chown(scratch / "data", 54321, 54321)
    with pytest.raises(
        UnsafeDirectoryError, match=f"^{scratch / 'data'} belongs to uid 54321, neither root nor nobody$"
    ):
        up_dirs.prepare_data_dir(scratch / "data", nobody)
    assert owners(scratch / "data") == [54321]


def test_the_collectors_directory_is_roots_alone_and_never_inside_the_data_directory(
    places: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    scratch, _ = places
    data = scratch / "data"
    monkeypatch.setenv("NETTRAIL_COLLECTOR_DIR", str(data / "collector"))
    with pytest.raises(UnsafeDirectoryError, match=f"^the collector's directory {data / 'collector'} is inside"):
        up_dirs.prepare_collector_dir(data)
    mine = scratch.with_name(scratch.name + "-collector")
    monkeypatch.setenv("NETTRAIL_COLLECTOR_DIR", str(mine))
    assert up_dirs.prepare_collector_dir(data) == mine
    info = mine.stat()
    assert (info.st_uid, info.st_mode & 0o777) == (0, 0o700)


@pytest.mark.slow
@pytest.mark.skipif(not readable_by_others(REPO), reason=f"the checkout {REPO} is in a private directory")
def test_up_never_opens_a_database_the_account_symlinked_to_a_root_file(places: tuple[Path, Path]) -> None:
    scratch, target = places
    account = up_dirs.ensure_user("nettrail", Path("/nonexistent"))
    data = scratch / "data"
    data.mkdir(mode=0o750)
    os.chown(data, account.pw_uid, account.pw_gid)
    as_user(account, data, f"ln -s {target}/victim nettrail.sqlite3 && ln -s {target} spool")
    env = up_env(data, NETTRAIL_COLLECTOR_DIR=str(scratch.with_name(scratch.name + "-collector")))
    command = [readable_python(), "-m", "nettrail.cli", "up", "--port", str(free_port()), "--no-collect"]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "nettrail up: the webapp cannot run on" in done.stderr and "unable to open database file" in done.stderr
    assert (target / "victim").read_bytes() == VICTIM
    assert owners(target, target / "victim") == [0, 0]
    assert sorted(p.name for p in target.iterdir()) == ["victim"]


@pytest.mark.slow
@pytest.mark.skipif(not readable_by_others(REPO), reason=f"the checkout {REPO} is in a private directory")
def test_serve_never_opens_a_database_the_account_symlinked_to_a_root_file(places: tuple[Path, Path]) -> None:
    """`nettrail serve` as root with SQLite (one writer) migrates as the account, as `up` does."""
    from redis_server import RedisServer

    scratch, target = places
    account = up_dirs.ensure_user("nettrail", Path("/nonexistent"))
    data = scratch / "data"
    data.mkdir(mode=0o750)
    os.chown(data, account.pw_uid, account.pw_gid)
    as_user(account, data, f"ln -s {target}/victim nettrail.sqlite3")
    redis_server = RedisServer()
    redis_server.start()
    try:
        env = up_env(data, REDIS_URL=redis_server.url)
        command = [readable_python(), "-m", "nettrail.cli", "serve", "--workers", "1", "--writers", "1",
                   "--port", str(free_port())]  # fmt: skip
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    finally:
        redis_server.close()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "unable to open database file" in done.stderr, done.stderr
    assert (target / "victim").read_bytes() == VICTIM
    assert owners(target, target / "victim") == [0, 0]
    assert sorted(p.name for p in target.iterdir()) == ["victim"]
