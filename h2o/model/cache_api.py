"""What the forward pass asks of the cache it runs with: one small interface, in the shape of
transformers' cache layers (``past_key_values.update(k, v, layer_idx)``).

:meth:`h2o.model.forward.SmolLM.forward` knows nothing else of its cache. It reads
:attr:`Cache.length` (the position its new tokens start at), calls :meth:`Cache.begin` once
before any layer runs (a cache refuses there what it could not finish), :meth:`Cache.update`
once per layer — the layer hands its new keys and values (and its queries, for a cache whose
method reads them) and gets back a :class:`LayerRead`, what that layer's attention reads — and
:meth:`Cache.commit` after the last layer.

A :class:`LayerRead` is the keys and values every query may score, plus what a kind of cache
changes about reading them, each optional:

* ``coded`` — a second copy of the keys and values (:class:`Coded`, e.g. dequantized codes)
  that query ``t`` reads below a cut of its own;
* ``select`` — which keys each query reads, masked before the softmax (a cache that holds
  every key and reads a part);
* ``observe`` — handed each chunk's attention weights after the softmax (what a scoring
  method reads), it answers which keys each query row may see from then on (a cache that
  evicts as it decodes).

The kinds the project runs: :class:`Prefill` (here: nothing held, a call reads its own keys),
:class:`h2o.model.kv_cache.KVCache` (every position, for generation), and three that wrap
another cache and fill one field each, so they stack: eviction while decoding
(:class:`h2o.model.closed_loop.ClosedLoopCache`), KIVI-style codes
(:class:`h2o.model.quant.QuantCache`) and a selection such as Quest's
(:class:`h2o.model.selecting.SelectingCache`); :func:`h2o.model.stack.cache_for` stacks them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Coded:
    """Keys and values held a second way (dequantized codes), ``(G, positions, hd)`` like the
    full-precision ones: query ``t`` reads keys ``j < key_cut(t)`` and values
    ``j < value_cut(t)`` from here, the rest at full precision. The cuts take an array of
    query positions and must not decrease with the position."""

    keys: np.ndarray
    values: np.ndarray
    key_cut: Callable[[np.ndarray], np.ndarray]
    value_cut: Callable[[np.ndarray], np.ndarray]


#: ``select(queries, keys, start)``: a bool mask ``(n_heads, rows, keys)`` of the keys each query
#: row reads — for the rows' ``queries`` ``(n_heads, rows, head_dim)`` (as they score) at
#: positions ``start ..`` over ``keys`` ``(n_kv_heads, keys, head_dim)`` — or None (every key).
Select = Callable[[np.ndarray, np.ndarray, int], "np.ndarray | None"]
#: ``observe(probs, start)``: given a chunk's causal attention ``(n_kv_heads, group, rows,
#: keys)`` for query rows at ``start ..``, the first row that may not see every causal key (the
#: row count: none) and the mask ``(n_kv_heads, rows, keys)`` of what each row sees (None if
#: none is restricted). Rows before the first keep the causal softmax bit for bit.
Observe = Callable[[np.ndarray, int], "tuple[int, np.ndarray | None]"]


@dataclass(frozen=True)
class LayerRead:
    """What one layer's attention reads (see the module docstring): keys ``(G, positions, hd)``
    rotated at their positions, values likewise, for positions ``0 .. start + n - 1``."""

    keys: np.ndarray
    values: np.ndarray
    coded: Coded | None = None
    select: Select | None = None
    observe: Observe | None = None


class Cache(Protocol):
    """The interface :meth:`h2o.model.forward.SmolLM.forward` calls (module docstring)."""

    @property
    def length(self) -> int:
        """Positions held before the call: its new tokens start here."""
        ...

    def begin(self, n: int) -> None:
        """``n`` new positions are about to run: raise ``ValueError`` now for what would fail
        partway (no room, a policy that has seen them already)."""
        ...

    def update(
        self, layer: int, keys: np.ndarray, values: np.ndarray, queries: np.ndarray
    ) -> LayerRead:
        """Layer ``layer``'s new keys (rotated) and values ``(G, n, hd)`` and its queries
        before RoPE ``(H, n, hd)``: hold what the cache holds and return what attention reads."""
        ...

    def commit(self, n: int) -> None:
        """Every layer has run the ``n`` new positions (not called if the pass stopped early)."""
        ...


class Prefill:
    """No cache: each call starts at position 0 and its attention reads the call's own keys
    and values (a causal prefill)."""

    length = 0

    def begin(self, n: int) -> None:
        pass

    def update(
        self, layer: int, keys: np.ndarray, values: np.ndarray, queries: np.ndarray
    ) -> LayerRead:
        return LayerRead(keys, values)

    def commit(self, n: int) -> None:
        pass


class Wrapping:
    """A kind of cache stacked on another (``inner``, which holds the keys and values): where
    it starts, what it refuses up front and its commit are the inner cache's; a kind writes
    :meth:`update` (and extends :meth:`begin` when it checks more)."""

    def __init__(self, inner: Cache) -> None:
        self.inner = inner

    @property
    def length(self) -> int:
        return self.inner.length

    def begin(self, n: int) -> None:
        self.inner.begin(n)

    def update(
        self, layer: int, keys: np.ndarray, values: np.ndarray, queries: np.ndarray
    ) -> LayerRead:
        return self.inner.update(layer, keys, values, queries)

    def commit(self, n: int) -> None:
        self.inner.commit(n)
