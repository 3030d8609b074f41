"""Adaptive per-head budgets, Ada-KV-style (after Feng et al. 2024, "Ada-KV: Optimizing KV
Cache Eviction by Adaptive Budget Allocation for Efficient LLM Inference", https://arxiv.org/abs/2407.11550).

Heads of one layer are not equally concentrated: one may need 20 positions, another 200.
Ada-KV fixes each *layer's* budget and lets its heads compete for it by score. Rule here
(the policy's own scores; its protected recent window stays protected)::

    per layer:  room = G * B - (each head's protected window)
    each head first keeps its own top  floor(alpha * (B - window))  evictable slots by score
    the rest of the room goes to a top-k over all heads' remaining slots together
    (ties: the higher position, then the lower head) — everything else is evicted

with ``alpha = 0.2`` (the paper's safeguard). With ``alpha = 1`` each head keeps exactly its
own top ``B - window``: uniform eviction, slot for slot. Each layer's total is exactly ``G B``;
which head holds how many changes as the text is read.

Not Ada-KV itself: the paper selects once after the prompt (on top of SnapKV or PyramidKV),
sharing each layer's budget by observation-window scores. Here the same cross-head top-k runs at
every decode step, on the decode-time policy's running scores.

A policy without scores (StreamingLLM, the sliding window) or with random victims gives
nothing to compare across heads: adaptive then runs as uniform, and says so.

:func:`ada_select` is the selection, on plain arrays; :class:`h2o.bank.adaptive.AdaptiveLayer`
runs it inside the model's closed loop, stepping one scored policy per head.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from h2o.policies import Policy, ScoredPolicy

from .base import Allocator, check_fraction

DEFAULT_ALPHA = 0.2


def guaranteed_slots(alpha: float, budget: int, window: int) -> int:
    """Each head's own share: ``floor(alpha * (budget - window))`` (exact at alpha = 1)."""
    return max(0, math.floor(alpha * (budget - window) + 1e-9))


def ada_select(
    scores: Sequence[np.ndarray],
    positions: Sequence[np.ndarray],
    room: int,
    guaranteed: int,
) -> list[np.ndarray]:
    """Which evictable slots each head keeps: one ascending index array per head.

    ``scores[h]``/``positions[h]`` are head ``h``'s evictable slots (any order); ``room`` is how
    many evictable slots the whole layer may keep; each head first keeps its own top
    ``guaranteed`` by score, then the rest of the room goes to the best remaining slots of all
    heads together. Higher score wins; equal scores keep the higher position, then the lower
    head. If everything fits in ``room``, everything is kept.
    """
    if room < 0 or guaranteed < 0:
        raise ValueError("room and guaranteed must be >= 0")
    sizes = [len(s) for s in scores]
    if sum(sizes) <= room:
        return [np.arange(n) for n in sizes]
    keep: list[np.ndarray] = []
    rest_s, rest_p, rest_h, rest_i = [], [], [], []
    for h, (s, p) in enumerate(zip(scores, positions, strict=True)):
        order = np.lexsort((-np.asarray(p), -np.asarray(s)))  # best first
        own = order[: min(guaranteed, len(order))]
        keep.append(own)
        other = order[len(own) :]
        rest_s.append(s[other])
        rest_p.append(p[other])
        rest_h.append(np.full(len(other), h))
        rest_i.append(other)
    left = room - sum(len(k) for k in keep)
    if left < 0:
        raise ValueError(f"the heads' own shares ({room - left}) exceed the room ({room})")
    if left:
        s, p, hh, ii = (np.concatenate(x) for x in (rest_s, rest_p, rest_h, rest_i))
        best = np.lexsort((hh, -p, -s))[:left]
        for h in range(len(keep)):
            keep[h] = np.concatenate([keep[h], ii[best[hh[best] == h]]])
    return [np.sort(k) for k in keep]


def adapts(policy: Policy) -> bool:
    """Whether adaptive allocation can compare ``policy``'s scores across heads."""
    return (
        isinstance(policy, ScoredPolicy)
        and policy.reads_attention
        and type(policy).evicts_by_argmin()
    )


class Adaptive(Allocator):
    name = "adaptive"
    label = "adaptive per head (Ada-KV-style)"
    dash = "dashdot"
    unlike_paper = (
        "Ada-KV selects once after the prompt (on top of SnapKV or PyramidKV), sharing each "
        "layer's budget among its heads by observation-window scores; here the same cross-head "
        "top-k runs at every decode step, on the policy's running scores (H2O's cumulative "
        "attention)."
    )

    def __init__(self, alpha: float = DEFAULT_ALPHA) -> None:
        self.alpha = check_fraction("alpha", alpha, zero_ok=True)

    def params(self):
        return {"alpha": self.alpha}

    def _budgets(self, L, G, B, shares):
        return np.full((L, G), B, dtype=np.int64), {"alpha": self.alpha, "params": self.params()}
