"""A cache that holds every key and reads a part of them each step (Quest), as a
:class:`h2o.model.cache_api.Cache` wrapping the cache that holds them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from h2o.model.cache_api import Cache, LayerRead, Wrapping

#: ``select(layer, queries, keys, start)``: which keys each query row may read — a bool mask
#: ``(n_heads, rows, keys)`` for the rows' ``queries`` ``(n_heads, rows, head_dim)`` (as they
#: score) at positions ``start ..`` over ``keys`` ``(n_kv_heads, keys, head_dim)``, or None (the
#: layer reads every key). A cache that holds every key but reads a part (Quest).
Selector = Callable[[int, np.ndarray, np.ndarray, int], "np.ndarray | None"]


class SelectingCache(Wrapping):
    """``inner``'s keys and values, each query reading the causal keys ``select`` gives it
    (masked before the softmax: the softmax over the keys read)."""

    def __init__(self, inner: Cache, select: Selector) -> None:
        super().__init__(inner)
        self.select = select

    def update(
        self, layer: int, keys: np.ndarray, values: np.ndarray, queries: np.ndarray
    ) -> LayerRead:
        read = self.inner.update(layer, keys, values, queries)
        select = self.select

        def layer_select(q: np.ndarray, k: np.ndarray, start: int) -> np.ndarray | None:
            return select(layer, q, k, start)

        return replace(read, select=layer_select)
