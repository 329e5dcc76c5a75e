"""Write-then-rename output files: a failed export never leaves a partial file behind.

The temporary file lives in the target's directory (same filesystem, so the rename is
atomic) and is removed on any exception, including KeyboardInterrupt.
Keep in sync with: docs/reports.md ("-o FILE").
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any


@contextmanager
def atomic_output(path: str | os.PathLike[str], *, binary: bool = False) -> Iterator[IO[Any]]:
    """Yields a stream; on success it becomes `path`, on failure it disappears."""
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".part", dir=directory)
    try:
        stream: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="")
        with stream:
            yield stream
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; exports are ordinary readable files
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
