"""H2O — Heavy-Hitter Oracle (Zhang et al., NeurIPS 2023, https://arxiv.org/abs/2306.14048).

Keep the positions that have received the most attention so far ("heavy hitters") plus a window of
recent ones. Each kept position's score is the sum of every attention weight it has received,
accumulated in float64 (the weights arrive as float32; thousands of float32 additions would lose
the low-order bits the eviction comparison depends on). Eviction drops the lowest cumulative score
outside the protected window; equal scores evict the lower position.

Card pseudocode::

    on_decode_step(pos, attn):
        for i, weight in enumerate(attn):      # attn is index-aligned with kept
            score[i] += weight                 # float64
        admit(pos, score = 0)

    evict(budget):
        evictable = kept[: len(kept) - recentWindow]
        drop the `len(kept) - budget` lowest-scoring of those

``recent_window >= budget`` is refused. The rng is accepted and never used: H2O is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import ScoredPolicy


class H2O(ScoredPolicy):
    name = "h2o"
    label = "H2O"
    colour, line_style = "#3D9DF3", ("solid", "circle-open", 13)  # on every chart
    score_label = "cumulative attention"
    #: The authors' generation code can also read a prompt with full attention and choose the
    #: heavy hitters from its accumulated attention before decoding (:mod:`h2o.model.prefill`).
    prefill_selection = True
    bank = "scored"

    @classmethod
    def bench_settings(cls, budget: int, windows: Sequence[int]) -> list[dict[str, int]]:
        # the window is what the comparison is about: one row per window
        return [{"recent_window": int(w)} for w in windows]

    @staticmethod
    def rule(score, attn, n):
        for i in range(n):  # attn is index-aligned with kept
            score[i] += attn[i]  # float64: a float32 weight is widened exactly
