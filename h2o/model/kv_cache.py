"""The full KV cache: every layer's keys and values of positions ``0 .. length-1`` (for
generation), as a :class:`h2o.model.cache_api.Cache`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from h2o.model.cache_api import LayerRead

if TYPE_CHECKING:
    from h2o.model.gguf_io import ModelConfig


class KVCache:
    """Keys and values of every layer for positions ``0 .. length-1`` (for generation).

    Evicted positions are not deleted: a closed loop's policies (their ``kept`` sets) decide
    which cached keys a query can see, which is computationally identical to a cache that frees
    them. Setting :attr:`length` back rewinds the cache (the next call overwrites from there).
    """

    def __init__(self, config: ModelConfig, capacity: int) -> None:
        shape = (config.n_layers, config.n_kv_heads, capacity, config.head_dim)
        self.k = np.zeros(shape, dtype=np.float32)
        self.v = np.zeros(shape, dtype=np.float32)
        self.length = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[2]

    def begin(self, n: int) -> None:
        if self.length + n > self.capacity:
            raise ValueError(f"cache capacity {self.capacity} < {self.length + n} positions")

    def update(
        self, layer: int, keys: np.ndarray, values: np.ndarray, queries: np.ndarray
    ) -> LayerRead:
        t0, end = self.length, self.length + keys.shape[1]
        self.k[layer, :, t0:end] = keys
        self.v[layer, :, t0:end] = values
        return LayerRead(self.k[layer, :, :end], self.v[layer, :, :end])

    def commit(self, n: int) -> None:
        self.length += n
