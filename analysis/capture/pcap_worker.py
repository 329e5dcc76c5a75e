"""Read and decode a capture in a child process while the parent analyses: two cores for one file.

The child (forked, so it shares every loaded module) runs CaptureReader and
translators.packet.decode_batch and sends each batch's compact form
(``Decoded.portable()``) through a pipe; the pipe's small buffer makes the child wait
for the parent, so at most a couple of batches are in flight and memory stays bounded.
Only for the analysis without per-packet records, which needs no packet bytes.

Keep in sync with: analysis/capture/pcap.py (CaptureReader, Damage, CaptureError) and
translators/packet.py (Decoded.portable).
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from analysis.capture.pcap import CHUNK, CaptureError, CaptureReader, Damage
from translators.packet import Decoded, decode_batch


def _produce(path: str, chunk_size: int, out: Connection) -> None:
    try:
        with CaptureReader(path, chunk_size=chunk_size) as reader:
            for batch in reader.batches():
                out.send(("batch", decode_batch(batch).portable(), reader.progress()))
            out.send(("end", reader.damage, reader.progress()))
    except CaptureError as exc:
        _tell(out, ("error", (exc.path, exc.offset, exc.reason), 0))
    except (BrokenPipeError, KeyboardInterrupt):
        pass  # the parent stopped listening (interrupted or failed): nothing left to say
    except BaseException:  # report, so the parent fails loudly instead of waiting forever
        _tell(out, ("crash", traceback.format_exc(), 0))
    finally:
        out.close()


def _tell(out: Connection, message: tuple[str, Any, int]) -> None:
    try:
        out.send(message)
    except OSError:
        pass


class DecodedStream:
    """Iterate decoded batches produced by a child process; `damage` is set at the end."""

    def __init__(self, path: str, chunk_size: int = CHUNK) -> None:
        ctx = multiprocessing.get_context("fork")
        self._recv, send = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_produce, args=(path, chunk_size, send), daemon=True)
        self._proc.start()
        send.close()
        self.damage = Damage()
        self.position = 0

    def progress(self) -> int:
        return self.position

    def __iter__(self) -> Iterator[Decoded]:
        try:
            while True:
                try:
                    kind, payload, position = self._recv.recv()
                except EOFError:
                    raise RuntimeError("capture reader process ended without a result") from None
                self.position = position
                if kind == "batch":
                    yield payload
                elif kind == "end":
                    self.damage = payload
                    return
                elif kind == "error":
                    raise CaptureError(*payload)
                else:
                    raise RuntimeError(f"capture reader process failed:\n{payload}")
        finally:
            self.close()

    def close(self) -> None:
        self._recv.close()
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()

    def __enter__(self) -> DecodedStream:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
