"""A process-wide cache bounded by bytes, not by entry count.

``st.cache_resource(max_entries=…)`` bounds how many values it keeps, whatever their size: two
dozen replays may be 300 MB or 5 GB. The server's memory is what a class of 30 shares, so the
app's big values (recorded replays, uploaded traces) live here instead: least recently used
first out once their bytes pass the cap, and each value computed once even when many sessions
ask for it at the same moment.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
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

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.total = 0
