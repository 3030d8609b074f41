"""Scissorhands (Liu et al., NeurIPS 2023, https://arxiv.org/abs/2305.17118).

"Persistence of importance": a position that mattered before will matter again. Instead of H2O's
cumulative sum, each kept position counts how many steps it beat its fair share — a vote when its
weight is strictly greater than ``1 / len(attn)``, the weight every kept position would get under
uniform attention. A count cannot be dominated by one huge step, so a stale early spike earns a
single vote per step it was attended and is let go once it stops mattering, where H2O's sum would
defend it forever.

Same mechanics as H2O: protected window of the last ``recent_window`` kept positions, eviction by
repeated argmin over the rest, equal counts evict the lower position, ``recent_window >= budget``
refused. Scores are vote counts (float64 holding whole numbers).

    on_decode_step(pos, attn):
        for i, weight in enumerate(attn):
            if weight > 1 / len(attn):
                score[i] += 1
        admit(pos, score = 0)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import ScoredPolicy


class Scissorhands(ScoredPolicy):
    name = "scissorhands"
    label = "Scissorhands"
    colour, line_style = "#249A80", ("dash", "square", 8)  # on every chart
    score_label = "votes (steps above fair share)"
    score_counts = True  # a vote count: whole numbers
    bank = "scored"

    @classmethod
    def bench_settings(cls, budget: int, windows: Sequence[int]) -> list[dict[str, int]]:
        # the window is what the comparison is about: one row per window
        return [{"recent_window": int(w)} for w in windows]

    @staticmethod
    def rule(score, attn, n):
        # Compared in float64, the weight widened exactly: numpy (a rule run as written) would
        # demote a Python float to a float32 weight's type and misjudge weights a rounding step
        # from 1/n; numba would widen. Said explicitly, both compare the same numbers.
        fair_share = 1.0 / n
        for i in range(n):
            if np.float64(attn[i]) > fair_share:
                score[i] += 1.0
