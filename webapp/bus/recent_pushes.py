"""The batches a writer pushed live in the last seconds, to push again after Redis went away.

A push Redis accepted can still miss a browser when Redis restarts: a message a
worker's receive loop had popped when the connection broke, or one the restart lost,
never arrives, and no later message need show the jump (the consumer sees a gap only
from the next message of the same sender and group). So when a writer's Redis
connection fails, the batches it pushed shortly before are pushed again once Redis is
back: browsers keep one row per (host, boot, seq), so a record seen twice costs
nothing, and one never seen is not lost silently.
Bounded by age (WINDOW_S before the failure) and by bytes (MAX_BYTES of entry bodies,
the oldest dropped first; what falls out is logged when a re-push needed it).
Keep in sync with: webapp/bus/writer.py, docs/scale-out.md.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW_S = 10.0  # seconds of pushes before a Redis failure that are pushed again
MAX_BYTES = 64 << 20  # entry bodies kept at most (msgpack, about 100 bytes a record)


@dataclass
class RecentPushes:
    window_s: float = WINDOW_S
    max_bytes: int = MAX_BYTES
    _bodies: deque[tuple[float, bytes]] = field(default_factory=deque)
    _bytes: int = 0
    dropped_at: float = float("-inf")  # push time of the newest body dropped for the byte bound

    def add(self, now: float, body: bytes) -> None:
        self._bodies.append((now, body))
        self._bytes += len(body)
        # kept for two windows: a failure is noticed up to a blocking read's time after it
        while self._bodies[0][0] < now - 2 * self.window_s:
            self._bytes -= len(self._bodies.popleft()[1])
        while self._bytes > self.max_bytes:
            at, old = self._bodies.popleft()
            self._bytes -= len(old)
            self.dropped_at = at

    def before(self, failed_at: float) -> tuple[list[bytes], bool]:
        """The bodies pushed in the window before a failure at `failed_at` (monotonic), and
        whether the byte bound dropped one that was in it (those records cannot be pushed again)."""
        start = failed_at - self.window_s
        return [body for at, body in self._bodies if at >= start], self.dropped_at >= start
