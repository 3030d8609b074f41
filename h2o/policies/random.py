"""Random eviction — the floor any attention-aware policy must clear.

Protects the last ``recent_window`` kept positions like H2O, then evicts uniformly at random among
the rest. It never reads the attention (scores stay 0). The only policy that uses its ``rng``;
without one it seeds ``numpy.random.default_rng(0)`` so that a replay is reproducible.
"""

from __future__ import annotations

import numpy as np

from .base import ScoredPolicy


class RandomEviction(ScoredPolicy):
    name = "random"
    label = "Random"
    colour, line_style = "#A3A3A4", ("longdash", "cross", 8)  # on every chart
    reads_attention = False
    score_label = "(no score)"
    evicts_by = "chance"
    bank = "scored"  # its draws run in numpy, lane by lane (no compiled rule)

    def _accumulate(self, score: np.ndarray, attn: np.ndarray) -> None:
        pass  # attention is ignored

    def _select(self, k: int, evictable: int) -> list[int]:
        if self.rng is None:  # reproducible by default; created once, then drawn from
            self.rng = np.random.default_rng(0)
        return [int(i) for i in self.rng.choice(evictable, size=k, replace=False)]
