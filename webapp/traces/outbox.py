"""One live websocket client's outbox: the encoded records waiting for it and the byte
ledger of what it was sent and has proven it read.

Used by webapp/traces/consumers.py (the protocol is in its docstring and docs/api.md).
Why a ledger in bytes: daphne writes every message we send into its transport at once,
so what a client does not read stays in the server's memory. The only proof that a
client read something is its ``{"ack": id}`` of a records message (TCP delivers in
order, so everything sent before that message was read too). Records message ids are
therefore unguessable -- increasing by a random step -- so a client that does not read
cannot acknowledge what it was sent: an ack naming no message sent is a lie, and the
consumer closes the socket. What was sent and not yet proven read (`unread`) is what
the consumer bounds.
"""

from __future__ import annotations

import secrets
from collections import deque
from dataclasses import dataclass, field
from typing import Any

# Ids grow by 1 + a random number below ID_STEP: a guess hits a real id about once in
# ID_STEP tries, and ids stay exact in a JavaScript number (2**53) for 2**32 messages.
ID_STEP = 1 << 20


def _first_id() -> int:
    return 1 + secrets.randbelow(ID_STEP)


@dataclass
class Outbox:
    """Records waiting to be pushed to one client (encoded), with the flow-control counters."""

    records: deque[bytes] = field(default_factory=deque)
    size: int = 0  # bytes in `records`
    # Keys of buffered and last-pushed records: a record reaching us through two groups
    # (host.H and conn.U) comes in two messages sent back to back by ingest.
    keys: set[tuple[Any, ...]] = field(default_factory=set)
    pushed_keys: set[tuple[Any, ...]] = field(default_factory=set)
    last_push: float = 0.0
    missed: int = 0  # records this client subscribed to that it will never get
    reported: int = 0  # of which it has been told (gap messages)
    # Next expected offset per (sender, group): ingest numbers the records it sends to a
    # group, so a message the channel layer dropped shows as a jump (push.py).
    offsets: dict[tuple[str, str], int] = field(default_factory=dict)
    # The ledger: bytes of every message sent on the socket, and of those the bytes up
    # to the end of the last records message the client acknowledged.
    written: int = 0
    read: int = 0
    in_flight: deque[tuple[int, int]] = field(default_factory=deque)  # (id, `written` after it)
    next_id: int = field(default_factory=_first_id)
    acked_id: int = 0

    @property
    def unread(self) -> int:
        """Bytes sent that the client has not proven it read: what may sit in daphne's buffer."""
        return self.written - self.read

    def add(self, encoded: list[bytes]) -> None:
        self.records.extend(encoded)
        self.size += sum(map(len, encoded))

    def clear(self) -> int:
        """Empty the buffer; returns how many records it held."""
        count = len(self.records)
        self.records.clear()
        self.keys.clear()
        self.size = 0
        return count

    def take(self, budget: int) -> list[bytes]:
        """Encoded records from the front of the buffer, as many as fit in `budget` bytes;
        one record over the limit alone cannot be sent and is counted as missed."""
        records = self.records
        parts: list[bytes] = []
        used = 0
        while records:
            size = len(records[0]) + 1  # the comma
            if used + size > budget:
                if parts:
                    break
                self.size -= len(records.popleft())
                self.missed += 1
                continue
            parts.append(records.popleft())
            used += size
        self.size -= used - len(parts)
        return parts

    def records_message(self, parts: list[bytes]) -> bytes:
        """The records message carrying `parts`, entered in the ledger as sent."""
        ident = self.next_id
        self.next_id += 1 + secrets.randbelow(ID_STEP)
        data = b'{"type":"records","id":%d,"records":[%s]}' % (ident, b",".join(parts))
        self.written += len(data)
        self.in_flight.append((ident, self.written))
        return data

    def sent(self, nbytes: int) -> None:
        """Another message (subscribed, error, gap) of `nbytes` went out."""
        self.written += nbytes

    def ack(self, ident: int) -> bool:
        """The client handled records message `ident` and every one before it.
        False: it names no message this socket was sent (a client acknowledging what it
        never read); an id already acknowledged changes nothing."""
        if ident <= self.acked_id:
            return True
        if not any(sent_id == ident for sent_id, _ in self.in_flight):
            return False
        while self.in_flight[0][0] != ident:
            self.in_flight.popleft()
        _, self.read = self.in_flight.popleft()
        self.acked_id = ident
        return True
