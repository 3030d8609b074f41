"""The decode-time side of a one-shot compression: a KV head's kept set that only grows.

Every kind of cache that compresses a prompt once (SnapKV, the presses of
:class:`~h2o.model.caches.base.ContextCompression`) hands the decoder one :class:`FixedKeep` per
(layer, KV head): the positions it chose, then every decoded token admitted and none evicted.
It imports nothing of the package, so :mod:`h2o.model.snapkv` (below the kinds) can use it too.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FixedKeep"]


class FixedKeep:
    """A KV head's cache after a one-shot compression: ``kept`` positions, then every decoded
    token admitted and none evicted. ``reads_attention = False``: it needs no signal."""

    reads_attention = False

    def __init__(self, kept: np.ndarray, last_pos: int) -> None:
        kept = np.asarray(kept, dtype=np.int64)
        if kept.ndim != 1 or (kept.size and (np.diff(kept) <= 0).any()):
            raise ValueError("kept must be strictly increasing positions")
        if kept.size and (kept[0] < 0 or kept[-1] > last_pos):
            raise ValueError(f"kept positions must lie in 0..{last_pos}")
        self._kept = kept
        self._last = int(last_pos)

    @property
    def kept(self) -> np.ndarray:
        return self._kept

    @property
    def last_pos(self) -> int:
        return self._last

    def __len__(self) -> int:
        return len(self._kept)

    def on_decode_step(self, pos: int, attn: np.ndarray | None) -> None:
        if pos <= self._last:
            raise ValueError(f"pos must increase strictly: got {pos} after {self._last}")
        self._kept = np.append(self._kept, pos)
        self._last = int(pos)

    def evict(self) -> list[int]:
        return []
