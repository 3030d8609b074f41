"""The ring bank: StreamingLLM and the sliding window, N lanes as one 2-D array of positions.

A StreamingLLM cache in arrival order is its pinned sinks followed by its ring from oldest to
newest, so a lane is one row ``pos[i, :n]``: admitting appends, and evicting ``k`` drops the
``k`` oldest positions after the sinks — ``pos[i, s:s+k]`` — by shifting the rest left. In
lock-step that is one slice copy for every lane with the same sinks and ``k``. Scores are zero.
"""

from __future__ import annotations

import numpy as np

from h2o.policies import Policy

from .base import NO_VICTIMS, PolicyBank


class _RingRow:
    """StreamingLLM's state as one bank row (mixed in before the policy's own class)."""

    _row: np.ndarray
    _n: int = 0  # a lane starts empty
    sinks: int

    def bind(self, row: np.ndarray) -> None:
        """Hold the kept positions in ``row`` (the lane's row of the bank's array)."""
        self._row = row

    @property
    def kept(self) -> np.ndarray:
        v = self._row[: self._n]
        v.flags.writeable = False
        return v

    @property
    def scores(self) -> np.ndarray:
        v = np.zeros(self._n)
        v.flags.writeable = False
        return v

    def __len__(self) -> int:
        return self._n

    @property
    def droppable(self) -> int:
        return max(0, self._n - self.sinks)

    def _set_fill(self, n: int) -> None:
        self._n = n

    def _step(self, pos: int, attn: np.ndarray | None) -> None:
        self._row[self._n] = pos
        self._n += 1

    def _evict(self, k: int) -> list[int]:
        row, s, n = self._row, self.sinks, self._n
        victims = row[s : s + k].tolist()
        row[s : n - k] = row[s + k : n]
        self._n = n - k
        return victims


_LANE_CLASSES: dict[type, type] = {}


def _lane_class(cls: type) -> type:
    """``cls`` with its ring replaced by a bank row (same name, parameters and checks)."""
    if cls not in _LANE_CLASSES:
        _LANE_CLASSES[cls] = type(cls.__name__, (_RingRow, cls), {"__module__": __name__})
    return _LANE_CLASSES[cls]


class RingBank(PolicyBank):
    """Lanes of StreamingLLM and its subclasses (the sliding window), each with its budget and
    sinks."""

    kind = "ring"

    def _kind(self, policies: list[Policy]) -> None:
        if not all(type(p).declares("bank") == "ring" for p in policies):
            raise ValueError("a ring bank holds StreamingLLM and sliding-window policies")

    def _lane(self, policy: Policy) -> Policy:
        return _lane_class(type(policy))(**policy.params())

    def _setup(self) -> None:
        sinks = np.array([lane.sinks for lane in self._lanes])
        groups = [(int(s), np.flatnonzero(sinks == s)) for s in np.unique(sinks)]
        self._by_sinks = [(s, slice(None)) for s, _ in groups] if len(groups) == 1 else groups

    def _reserve(self, cap: int) -> None:
        if cap <= self._cap:
            return
        cap = max(cap, 2 * self._cap)
        pos = np.zeros((self.size, cap), dtype=np.int32)
        if self._cap:
            pos[:, : self._cap] = self._pos
        self._pos, self._cap = pos, cap
        self._bind_lanes()

    def _bind_lanes(self) -> None:
        for i, lane in enumerate(self._lanes):
            lane.bind(self._pos[i])

    def _advance_lockstep(self, pos: int, attn: np.ndarray | None) -> None:
        n = self._fill
        if n == self._cap:
            self._reserve(n + 1)
        self._pos[:, n] = pos
        self._fill = n + 1
        self._last_pos = pos
        self._stale = True

    def _evict_lockstep(
        self, k: np.ndarray | int, victims: bool = True
    ) -> tuple[np.ndarray, np.ndarray] | None:
        if not isinstance(k, int):
            return None  # budgets differ: each lane's own code
        n, pos = self._fill, self._pos
        gone = np.empty((self.size, k), dtype=pos.dtype)
        for s, rows in self._by_sinks:  # usually one group: one slice for every lane
            if victims:
                gone[rows] = pos[rows, s : s + k]
            pos[rows, s : n - k] = pos[rows, s + k : n]
        self._fill = n - k
        if not victims:
            return NO_VICTIMS
        return (self._all if k == 1 else np.repeat(self._all, k)), gone.ravel()
