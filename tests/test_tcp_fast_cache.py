"""The fast path's compiled library is loaded only when this user alone could have written it
(analysis/flows/tcp_fast.py): a root `nettrail capture` must not run code another user
planted in its cache. Anything else gets the Python path, whose output is the same."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from analysis.flows import tcp_fast

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: the fast path is not built")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("NETTRAIL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(tcp_fast, "_loaded", False)  # load() again, from this cache
    yield tmp_path / "cache"
    monkeypatch.setattr(tcp_fast, "_loaded", False)


def target(cache: Path) -> Path:
    return cache / f"tcp_fast-{hashlib.sha256(tcp_fast.SOURCE.read_bytes()).hexdigest()[:16]}.so"


def built(cache: Path) -> Path:
    """The library as load() compiles it into the cache (then forgotten by the module)."""
    assert tcp_fast.load() is not None
    tcp_fast._loaded = False
    return target(cache)


def test_it_compiles_into_a_private_cache_and_loads_it(cache: Path) -> None:
    assert tcp_fast.load() is not None
    so = target(cache)
    assert so.is_file() and (so.stat().st_mode & 0o077, cache.stat().st_mode & 0o077) == (0, 0)


def test_a_library_another_user_could_write_is_not_loaded(cache: Path) -> None:
    so = built(cache)
    so.chmod(0o722)
    assert tcp_fast.load() is None


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the file to another user")
def test_a_library_owned_by_another_user_is_not_loaded(cache: Path) -> None:
    so = built(cache)
    os.chown(so, 65534, 65534)
    assert tcp_fast.load() is None


def test_a_link_in_place_of_the_library_is_not_followed(cache: Path, tmp_path: Path) -> None:
    so = built(cache)
    elsewhere = tmp_path / "planted.so"
    so.rename(elsewhere)
    so.symlink_to(elsewhere)
    assert tcp_fast.load() is None


def test_a_cache_directory_others_can_write_is_not_trusted(cache: Path) -> None:
    built(cache)
    cache.chmod(0o777)
    assert tcp_fast.load() is None
