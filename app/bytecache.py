"""A process-wide cache bounded by bytes, not by entry count.

``st.cache_resource(max_entries=…)`` bounds how many values it keeps, whatever their size: two
dozen replays may be 300 MB or 5 GB. The server's memory is what a class of 30 shares, so the
app's big values (recorded replays, uploaded traces) live here instead: least recently used
first out once their bytes pass the cap, and each value computed once even when many sessions
ask for it at the same moment. :class:`Holds` lets go of a session's values when it ends, instead
of waiting for them to become the least recently used.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

V = TypeVar("V")


class ByteCache(Generic[V]):
    """Values by key; ``nbytes(value)`` says what each holds. The newest value always stays,
    even alone above the cap (a view that needs it must get it)."""

    def __init__(self, max_bytes: int, nbytes: Callable[[V], int]) -> None:
        self.max_bytes = max_bytes
        self._nbytes = nbytes
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._computing: dict[Hashable, threading.Lock] = {}
        self.total = 0

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
            gate = self._computing.setdefault(key, threading.Lock())
        with gate:  # one computation per key; the others wait for it and then hit
            with self._lock:
                if key in self._items:
                    self._items.move_to_end(key)
                    return self._items[key][0]
            value = make()
            size = self._nbytes(value)
            with self._lock:
                self._items[key] = (value, size)
                self.total += size
                while self.total > self.max_bytes and len(self._items) > 1:
                    _, (_, old) = self._items.popitem(last=False)
                    self.total -= old
                self._computing.pop(key, None)
            return value

    def discard(self, which: Callable[[Hashable], bool]) -> int:
        """Drop every value whose key ``which`` accepts; the bytes they held."""
        with self._lock:
            gone = [k for k in self._items if which(k)]
            freed = sum(self._items.pop(k)[1] for k in gone)
            self.total -= freed
        return freed

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.total = 0


class Holds:
    """Which holders (browser sessions) hold which keys (upload digests): ``on_free(key)`` runs
    when the last holder lets go of a key, so what was computed from it can go at once."""

    def __init__(self, on_free: Callable[[Hashable], None]) -> None:
        self._on_free = on_free
        self._held: dict[Hashable, frozenset[Hashable]] = {}
        self._count: Counter[Hashable] = Counter()
        self._lock = threading.Lock()

    def hold(self, holder: Hashable, keys: Iterable[Hashable]) -> None:
        """Make ``holder`` hold exactly ``keys``: the keys it no longer holds are let go."""
        new = frozenset(keys)
        with self._lock:
            old = self._held.pop(holder, frozenset())
            if new:
                self._held[holder] = new
            self._count.update(new - old)
            for key in old - new:
                self._count[key] -= 1
                if self._count[key] <= 0:
                    del self._count[key]
                    # Under the lock: a session taking the key up again waits for the drop,
                    # then computes afresh (rather than being dropped just after).
                    self._on_free(key)

    def release(self, holder: Hashable) -> frozenset[Hashable]:
        """``holder`` has ended: let go of everything it held (returned)."""
        with self._lock:
            held = self._held.get(holder, frozenset())
        self.hold(holder, ())
        return held

    def holders(self, key: Hashable) -> int:
        with self._lock:
            return self._count[key]
