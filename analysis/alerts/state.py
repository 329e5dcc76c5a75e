"""Bounded state for the rule engine: LRU maps with caps and per-second sliding windows.

Every per-flow, per-host or per-source table of the engine is an ``LruMap`` with a cap
from the rules configuration ([engine] section), so a scan across a million addresses
evicts the oldest entries instead of growing without bound. Keep in sync with
docs/alerts.md (the memory bound it states depends on these structures).
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LruMap(Generic[K, V]):
    """A dict that keeps at most ``cap`` entries, evicting the least recently touched.

    ``get_or_create`` and ``touch`` move an entry to the young end; ``expire`` drops
    entries whose last touch is older than a deadline (touch times are kept per entry).
    """

    __slots__ = ("cap", "evicted", "_data", "_on_evict")

    def __init__(self, cap: int, on_evict: Callable[[K, V], None] | None = None) -> None:
        if cap < 1:
            raise ValueError(f"LruMap cap must be >= 1, got {cap}")
        self.cap = cap
        self.evicted = 0
        self._data: OrderedDict[K, V] = OrderedDict()
        self._on_evict = on_evict

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def peek(self, key: K) -> V | None:
        """Read without refreshing the entry's age."""
        return self._data.get(key)

    def get_or_create(self, key: K, factory: Callable[[], V]) -> V:
        value = self._data.get(key)
        if value is None:
            value = factory()
            self._data[key] = value
            if len(self._data) > self.cap:
                self._evict_oldest()
        else:
            self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.cap:
            self._evict_oldest()

    def pop(self, key: K) -> V | None:
        return self._data.pop(key, None)

    def items(self) -> Iterator[tuple[K, V]]:
        """Oldest first; do not modify the map while iterating."""
        return iter(self._data.items())

    def values(self) -> Iterator[V]:
        return iter(self._data.values())

    def _evict_oldest(self) -> None:
        key, value = self._data.popitem(last=False)
        self.evicted += 1
        if self._on_evict is not None:
            self._on_evict(key, value)


class Window:
    """Event counts in a sliding window with one-second buckets.

    ``add(t, n)`` counts n events at time t (seconds); ``total(t)`` sums the buckets in
    (t - span, t]. At most ``span`` buckets are kept, so memory per window is bounded
    whatever the event rate; an empty window holds no list at all (millions of flows).
    """

    __slots__ = ("span", "_secs", "_counts")

    def __init__(self, span: float) -> None:
        self.span = span
        # arrays, not lists: 8 bytes a bucket instead of two boxed numbers
        self._secs: array[int] | None = None
        self._counts: array[float] | None = None

    def add(self, t: float, n: float = 1.0) -> None:
        sec = int(t)
        secs, counts = self._secs, self._counts
        if not secs or counts is None:
            self._secs, self._counts = array("q", (sec,)), array("d", (n,))
            return
        if secs[-1] >= sec:
            counts[-1] += n  # same second (or a late record): the newest bucket
        else:
            secs.append(sec)
            counts.append(n)
            self._trim(t)

    def total(self, t: float) -> float:
        self._trim(t)
        return sum(self._counts) if self._counts else 0.0

    def seconds_with_events(self, t: float) -> int:
        self._trim(t)
        return sum(1 for c in self._counts if c > 0) if self._counts else 0

    def per_second(self, t: float, seconds: int) -> list[float]:
        """Counts of the last ``seconds`` whole seconds up to t, oldest first, zeros included."""
        self._trim(t)
        now = int(t)
        counts = dict(zip(self._secs or (), self._counts or (), strict=True))
        return [counts.get(s, 0.0) for s in range(now - seconds + 1, now + 1)]

    def empty(self, t: float) -> bool:
        self._trim(t)
        return not self._secs

    def _trim(self, t: float) -> None:
        secs = self._secs
        if not secs:
            return
        oldest = int(t) - self.span
        if secs[0] > oldest:
            return
        k = 0
        while k < len(secs) and secs[k] <= oldest:
            k += 1
        assert self._counts is not None
        del secs[:k]
        del self._counts[:k]


def bounded_append(evidence: list[int] | None, seq: int, cap: int = 16) -> list[int]:
    """Append a seq to an evidence list kept to its first ``cap`` entries (created on demand)."""
    if evidence is None:
        return [seq]
    if len(evidence) < cap:
        evidence.append(seq)
    return evidence


class DistinctWindow(Generic[K]):
    """Distinct items seen in a sliding window, capped at ``cap`` items.

    Used by the scan heuristics: "failed connections to >= 25 distinct hosts within
    5 min". Once the cap is reached, new items are not stored; the cap is set above
    the alert threshold so the count that matters is exact.
    """

    __slots__ = ("span", "cap", "_seen")

    def __init__(self, span: float, cap: int) -> None:
        self.span = span
        self.cap = cap
        self._seen: OrderedDict[K, float] = OrderedDict()

    def add(self, t: float, item: K) -> int:
        if item in self._seen:
            self._seen.move_to_end(item)
            self._seen[item] = t
        elif len(self._seen) < self.cap:
            self._seen[item] = t
        return self.count(t)

    def discard(self, item: K) -> None:
        self._seen.pop(item, None)

    def count(self, t: float) -> int:
        while self._seen:
            item, seen = next(iter(self._seen.items()))
            if seen > t - self.span:
                break
            self._seen.popitem(last=False)
        return len(self._seen)

    def items(self) -> list[K]:
        return list(self._seen)
