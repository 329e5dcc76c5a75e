"""A root collector's spool cannot be redirected by another user (issue #33, item 1).

The issue's attack: the webapp's account owns the data directory, the root-owned spool
lives in it; that account renames the spool and puts a symlink to a root-only directory
in its place, then a 401 (a revoked token) or a 5xx made root write `rejected/`,
`*-401.msgpack`, `*-401.error` and spool segments there, and delete the oldest. Here the
real HttpSink runs as root against a stub server, `nobody` (a real unprivileged account)
plays the webapp's account, and the swaps are done by it: a spool with such a directory
on its way is refused before anything is written, and in the collector's own directory
`nobody` cannot swap anything, so refused and spooled batches stay inside it.
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
from ingest_stub import TOKEN, IngestStub, make_records

from collector.private_dir import UnsafeDirectoryError
from collector.sinks.http import HttpSink

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the swaps are another user's")
WAIT = 60.0  # seconds: a bound for a loaded machine


@pytest.fixture
def nobody() -> pwd.struct_passwd:
    return pwd.getpwnam("nobody")


@pytest.fixture
def places() -> Iterator[tuple[Path, Path]]:
    """(a scratch directory under /tmp, a root-only 0700 directory: the swaps' target)."""
    scratch = Path(tempfile.mkdtemp(prefix="nettrail-swap-"))
    scratch.chmod(0o755)  # nobody passes through, as through /var/lib
    target = Path(tempfile.mkdtemp(prefix="nettrail-root-only-"))
    yield scratch, target
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)


def as_user(account: pwd.struct_passwd, cwd: Path, script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=WAIT,
        user=account.pw_uid, group=account.pw_gid, extra_groups=[],
    )  # fmt: skip


def webapp_data_dir(scratch: Path, account: pwd.struct_passwd) -> Path:
    """The data directory as `nettrail up` leaves it: the account's, 0750, a root-owned spool inside."""
    data = scratch / "data"
    data.mkdir(mode=0o750)
    os.chown(data, account.pw_uid, account.pw_gid)
    (data / "spool").mkdir(mode=0o755)
    return data


def tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_the_issues_symlink_swap_of_the_spool_is_refused_before_anything_is_written(
    stub: IngestStub, nobody: pwd.struct_passwd, places: tuple[Path, Path]
) -> None:
    scratch, target = places
    data = webapp_data_dir(scratch, nobody)
    swapped = as_user(nobody, data, f"mv spool spool.orig && ln -s {target} spool")
    assert swapped.returncode == 0, swapped.stderr  # the account owns the directory: it can
    with pytest.raises(UnsafeDirectoryError) as refused:
        HttpSink(stub.url, "nt_revoked", data / "spool", flush_interval=0.01)
    assert str(refused.value).startswith(f"{data} is owned by uid {nobody.pw_uid}: that user could redirect")
    assert (tree(target), stub.requests) == ([], 0)


def test_a_root_owned_spool_inside_the_accounts_directory_is_refused_before_any_swap(
    stub: IngestStub, nobody: pwd.struct_passwd, places: tuple[Path, Path]
) -> None:
    """The swap could come at any time after start: the place itself is refused."""
    scratch, _ = places
    data = webapp_data_dir(scratch, nobody)
    with pytest.raises(UnsafeDirectoryError, match=f"^{data} is owned by uid {nobody.pw_uid}: "):
        HttpSink(stub.url, TOKEN, data / "spool", flush_interval=0.01)
    assert tree(data) == ["spool"]  # nothing made: no ledger, no rejected/


def test_a_symlink_anywhere_on_the_way_to_the_spool_is_refused_not_followed(
    stub: IngestStub, places: tuple[Path, Path]
) -> None:
    scratch, target = places
    (scratch / "link").symlink_to(target)
    with pytest.raises(UnsafeDirectoryError, match=f"^{scratch / 'link'} is a symbolic link: refusing to follow it$"):
        HttpSink(stub.url, TOKEN, scratch / "link" / "spool", flush_interval=0.01)
    assert tree(target) == []


def test_a_directory_others_may_write_on_the_way_is_refused_but_a_sticky_one_is_not(
    stub: IngestStub, places: tuple[Path, Path]
) -> None:
    scratch, _ = places
    shared = scratch / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(UnsafeDirectoryError, match=f"^{shared} \\(mode 0777\\) is writable by other users"):
        HttpSink(stub.url, TOKEN, shared / "spool", flush_interval=0.01)
    assert tree(shared) == []
    shared.chmod(0o1777)  # /tmp's way: only a name's owner may rename or remove it
    sink = HttpSink(stub.url, TOKEN, shared / "spool", flush_interval=0.01)
    sink.close()
    assert (shared / "spool").stat().st_uid == 0


def test_in_the_collectors_own_directory_refused_and_spooled_batches_stay_inside_it(
    stub: IngestStub, nobody: pwd.struct_passwd, places: tuple[Path, Path]
) -> None:
    """The issue's sequence against the layout `nettrail up` uses now: the swap fails,
    then a 401 and a 503 leave their files in the collector's spool alone."""
    scratch, target = places
    mine = scratch / "collector"
    mine.mkdir(mode=0o700)
    spool = mine / "spool"
    revoked = HttpSink(stub.url, "nt_revoked", spool, flush_interval=0.01)
    try:
        swapped = as_user(nobody, scratch, f"mv collector/spool collector/spool.orig || ln -sfn {target} collector")
        assert swapped.returncode != 0 and "Permission denied" in swapped.stderr
        revoked.write(make_records(1, 5))  # answered 401: the token is not the host's
        assert revoked.flush(WAIT)
    finally:
        revoked.close(timeout=0.1)
    stub.fail_next, stub.fail_status = 1_000, 503
    failing = HttpSink(stub.url, TOKEN, spool, flush_interval=0.01)
    try:
        failing.write(make_records(6, 5))  # answered 503: spooled
        assert failing.flush(WAIT)
    finally:
        failing.close(timeout=0.1)
    assert (revoked.stats.rejected_batches, failing.stats.spooled_batches) == (1, 1)
    kept = tree(spool)
    assert [name.rsplit("-", 1)[1] for name in kept if name.startswith("rejected/")] == ["401.error", "401.msgpack"]
    assert any(name.endswith(".seg") for name in kept)
    assert tree(target) == [] and not (spool / "rejected").is_symlink()
    assert {p.stat().st_uid for p in spool.rglob("*")} == {0}
