"""The renderer interface every style implements, with the defaults most styles share.

Keep in sync with: xo/writer.py, which is the only caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from xo.fields import Field

if TYPE_CHECKING:
    from xo.writer import Frame, Writer


class Renderer:
    """Base renderer: hierarchy calls are invisible (the display styles' behaviour)."""

    def __init__(self, writer: Writer) -> None:
        self.w = writer
        self.opts = writer.options
        self.write = writer.write

    def open(self, frame: Frame, parent: Frame) -> None:
        """A container, list or instance was opened."""

    def close(self, frame: Frame, parent: Frame) -> None:
        """A container, list or instance was closed."""

    def emit(self, items: list[tuple[Field, Any]]) -> None:
        raise NotImplementedError

    def record(self, rec: msgspec.Struct, name: str) -> None:
        raise NotImplementedError

    def error(self, message: str) -> None:
        raise NotImplementedError

    def message(self, message: str) -> None:
        raise NotImplementedError

    def flush_pending(self) -> None:
        """Write anything held back (only HTML holds an open line)."""

    def finish(self) -> None:
        """End the document."""
