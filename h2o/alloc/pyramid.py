"""Budgets shrinking with depth, PyramidKV-style (after Cai et al. 2024, "PyramidKV: Dynamic KV
Cache Compression based on Pyramidal Information Funneling", https://arxiv.org/abs/2406.02069).

Lower layers spread their attention widely, upper layers focus it on a few positions, so the
budget shrinks linearly with depth. With the protected window ``w``, the average per head
``cap`` and ``beta`` (20 in the paper)::

    lo = (cap - w) / beta
    hi = 2 (cap - w) - lo
    layer l of L gets  hi - l (hi - lo) / (L - 1)  +  w        (every head of the layer)

The layer values average exactly ``cap`` (the arithmetic series averages ``(hi + lo) / 2 =
cap - w``); they are rounded by largest remainder so that the total is exactly ``L * G * cap``.
``cap <= w`` is refused (no room above the window), as is ``beta < 1``.

Not PyramidKV itself: the paper compresses once, after the prompt, keeping each layer's tokens
by the attention of an observation window (the prompt's last queries). Only its depth schedule
is used here; the decode-time policy evicts within each layer's budget as the text is read.
"""

from __future__ import annotations

import numpy as np

from h2o.policies.base import check_int

from .base import Allocator, round_to_total


def pyramid_layer_values(n_layers: int, cap: int, window: int, beta: float) -> np.ndarray:
    """The unrounded per-head budget of each layer (float64), as in the formula above."""
    lo = (cap - window) / beta
    hi = 2 * (cap - window) - lo
    if n_layers == 1:
        return np.array([float(cap)])
    layer = np.arange(n_layers, dtype=np.float64)
    return hi - layer * (hi - lo) / (n_layers - 1) + window


class Pyramid(Allocator):
    name = "pyramid"
    label = "pyramid (PyramidKV-style)"
    dash = "dot"
    unlike_paper = (
        "PyramidKV selects once after the prompt, by the attention of an observation window of "
        "its last queries; here only its depth schedule is used, and a decode-time policy (H2O, "
        "StreamingLLM, …) evicts within each layer's budget while the text is read."
    )

    def __init__(self, window: int = 32, beta: float = 20.0) -> None:
        self.window = check_int("window", window, 0)
        if isinstance(beta, bool) or not isinstance(beta, int | float) or not beta >= 1:
            raise ValueError(f"beta must be a number >= 1, got {beta!r}")
        self.beta = float(beta)

    def params(self):
        return {"window": self.window, "beta": self.beta}

    def _budgets(self, L, G, B, shares):
        if self.window >= B:
            raise ValueError(
                f"pyramid needs budget > window: budget {B}, window {self.window} leaves no "
                "room to shrink with depth"
            )
        per_layer = round_to_total(pyramid_layer_values(L, B, self.window, self.beta), L * B)
        return np.repeat(per_layer[:, None], G, axis=1), {"params": self.params()}
