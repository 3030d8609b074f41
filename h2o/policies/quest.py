"""Quest — evict nothing, read only the pages a query can attend to (Tang, Zhao, Zhu, Xiao,
Kasikci and Han, ICML 2024, "Quest: Query-Aware Sparsity for Efficient Long-Context LLM
Inference", https://arxiv.org/abs/2406.10774; mit-han-lab/Quest, ``evaluation/quest_attention.py``).

Every other method here decides what the cache *holds*. Quest holds every key and decides what
each step *reads*: the cache is cut into pages of 16 keys, each page keeps per channel its largest
and smallest key, and since ``q·k ≤ Σ_i max(q_i · max_i, q_i · min_i)`` for every key of a page,
the pages with the highest bound are the ones the query can attend to::

    on_decode_step(pos):                   # holds pos; nothing is ever evicted
        q     = the query at pos (after RoPE), of the trace's one query head
        u[p]  = Σ_i max(q_i · maxK[p, i], q_i · minK[p, i]) / √d   over the pages of 0 .. pos-1
                (the last one partial)
        read  = the top min(max(3, B // 16), pages) pages by u, B = min(budget, pos)
                (the layers before the third read every key: the reference's ``layer_id < 2``;
                a budget under 48 is refused: it would read 3 pages anyway)

Stepped on a captured trace, what the player shows as "kept" at a step is what that step reads:
a position leaves and comes back. The retained mass is the attention the step's query pays the
keys it reads. Quest chooses per query head, so it steps on a trace of one query head (``python
-m h2o capture --head N``); a trace that averages a layer's heads has no one query to rank pages
by. As the model's ``quest@B`` rows, equal bounds read the later page and the pages are the
reference's; ours: on a trace a step's keys are ``0 .. pos-1`` (a row's), not the current token
too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..trace_vectors import HeadVectors
from .base import Policy, check_int

#: The reference's defaults: pages of 16 keys, at least 3 read, the first 2 layers dense.
PAGE, MIN_PAGES, DENSE_LAYERS = 16, 3, 2


def n_pages_read(budget: int, n_keys: int) -> int:
    """How many pages a step with ``n_keys`` keys reads: the reference's
    ``min(max(3, min(n_keys, budget) // 16), n_pages)``."""
    n_pages = -(-n_keys // PAGE)
    return min(max(MIN_PAGES, min(n_keys, budget) // PAGE), n_pages)


def page_bounds(q: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``(pages,)``: each page's bound on ``q·k / √d`` for the keys ``(n, d)``, pages of
    :data:`PAGE` from the first key (the last one partial)."""
    n, d = keys.shape
    P = -(-n // PAGE)
    pad = np.empty((P * PAGE, d))
    pad[:n], pad[n:] = keys, -np.inf
    kmax = pad.reshape(P, PAGE, d).max(axis=1)
    pad[n:] = np.inf
    kmin = pad.reshape(P, PAGE, d).min(axis=1)
    q = np.asarray(q, dtype=np.float64)
    return (np.maximum(q * kmax, q * kmin)).sum(axis=1) / np.sqrt(d)


def pages_read(bounds: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` pages with the highest bound, ascending (equal bounds: the later page)."""
    P = bounds.shape[0]
    order = np.lexsort((-np.arange(P), -bounds))
    return np.sort(order[:k])


def rotate(q: np.ndarray, pos: int, base: float) -> np.ndarray:
    """A query before RoPE, rotated at ``pos`` (adjacent pairs)."""
    d = q.shape[-1]
    ang = pos * base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    c, s = np.cos(ang), np.sin(ang)
    out = np.empty(d)
    out[0::2] = q[0::2] * c - q[1::2] * s
    out[1::2] = q[0::2] * s + q[1::2] * c
    return out


class Quest(Policy):
    name = "quest"
    label = "Quest"
    colour, line_style = "#992255", ("dot", "hexagon", 8)  # on every chart
    score_label = "page bound on q·k/√d"
    reads_attention = False
    reads_trace = ("vectors",)
    selects = True  # a selection, not an eviction: h2o.replay_selection steps it

    def __init__(
        self,
        budget: int = 512,
        *,
        vectors: HeadVectors | None = None,
        layer: int | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(budget, rng=rng)
        if self.budget < MIN_PAGES * PAGE:
            raise ValueError(
                f"Quest reads at least {MIN_PAGES} pages of {PAGE} ({MIN_PAGES * PAGE} keys) a "
                f"step: a budget of {self.budget} would read more than it says. Raise the budget "
                f"to {MIN_PAGES * PAGE} or more"
            )
        self._vec = vectors
        self.layer = None if layer is None else check_int("layer", layer, 0)

    @classmethod
    def missing_from(cls, trace: object | None) -> list[str]:
        missing = super().missing_from(trace)
        vec = getattr(trace, "vectors", None)
        if not missing and vec is not None and vec.queries.shape[1] != 1:
            missing.append("vectors of one query head (this trace averages several)")
        return missing

    def observe(self, trace: object) -> None:
        super().observe(trace)
        self._vec = trace.vectors  # type: ignore[attr-defined]  # checked by the trace
        layer = trace.meta.get("layer")  # type: ignore[attr-defined]
        if isinstance(layer, int) and not isinstance(layer, bool) and layer >= 0:
            self.layer = layer  # the trace says which layer it is (else the one given, if any)

    @property
    def dense(self) -> bool:
        """Whether it reads every key: the reference's first two layers."""
        return self.layer is not None and self.layer < DENSE_LAYERS

    def most_read(self, steps: int) -> int:
        """The most positions a step of a ``steps``-step trace reads (its snapshots' width)."""
        last = max(steps - 1, 0)
        return last if self.dense else min(last, PAGE * n_pages_read(self.budget, last))

    def read(self, pos: int) -> tuple[np.ndarray, np.ndarray]:
        """What the query at ``pos`` reads of the keys ``0 .. pos-1``: the positions (ascending)
        and each one's page bound (every key in the first two layers)."""
        vec = self._vec
        if vec is None or pos >= vec.positions or vec.queries.shape[1] != 1:
            raise ValueError(
                f"Quest ranks the pages of keys by one query head's query at {pos}: give the "
                "vectors of one query head (vectors=…, or a trace captured with --head N)"
            )
        if pos == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        q = rotate(vec.queries[pos, 0].astype(np.float64), pos, vec.rope_base)
        bounds = page_bounds(q, vec.keys[:pos, 0].astype(np.float64))
        if self.dense:  # every page read; each key still shown with its page's bound
            return np.arange(pos), bounds[np.arange(pos) // PAGE]
        pages = pages_read(bounds, n_pages_read(self.budget, pos))
        idx = (pages[:, None] * PAGE + np.arange(PAGE)).reshape(-1)
        idx = idx[idx < pos]
        return idx, bounds[idx // PAGE]

    def params(self) -> dict[str, Any]:
        return {"budget": self.budget}

    # -- the contract: it holds every position admitted and never evicts ----------------------
    @property
    def kept(self) -> np.ndarray:
        v = np.arange(self._last_pos + 1, dtype=np.int32)
        v.flags.writeable = False
        return v

    @property
    def scores(self) -> np.ndarray:
        v = np.zeros(self._last_pos + 1)
        v.flags.writeable = False
        return v

    def __len__(self) -> int:
        return self._last_pos + 1

    @property
    def droppable(self) -> int:
        return 0

    def _step(self, pos: int, attn: np.ndarray | None) -> None:
        if pos != self._last_pos + 1:
            raise ValueError(f"Quest holds every position: pos {pos} skips {self._last_pos + 1}")

    def _evict(self, k: int) -> list[int]:
        return []
