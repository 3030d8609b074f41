"""TOVA — Token Omission Via Attention (Oren et al., 2024, https://arxiv.org/abs/2401.06104).

"Transformers are Multi-State RNNs": when the cache is full, drop the position the *current* query
attends to least. No history at all: each kept position's score is its weight in the latest step
(overwritten, not accumulated). The position just admitted has no weight yet, so the default
``recent_window = 1`` protects it; everything else competes on the last step alone.

    on_decode_step(pos, attn):
        for i, weight in enumerate(attn):
            score[i] = weight
        admit(pos, score = 0)

Shares H2O's window, argmin and tie rules (equal weights evict the lower position).
"""

from __future__ import annotations

from .base import ScoredPolicy


class TOVA(ScoredPolicy):
    name = "tova"
    label = "TOVA"
    colour, line_style = "#B07AA1", ("dot", "diamond", 6)  # on every chart
    score_label = "last step's attention"

    default_recent_window = 1
    own_window = True  # the paper's TOVA protects nothing but the token just admitted
    bank = "scored"

    @staticmethod
    def rule(score, attn, n):
        for i in range(n):
            score[i] = attn[i]  # overwritten, not accumulated
