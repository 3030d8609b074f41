"""K-norm — keep the keys with the smallest L2 norm (Devoto et al., 2024, "A Simple and
Effective L2 Norm-Based Strategy for KV Cache Compression", https://arxiv.org/abs/2406.11430;
kvpress's ``KnormPress``).

The paper's observation: a key with a low L2 norm tends to receive *high* attention (the attention
sinks have the smallest norms of all), so the norm alone, known the moment a key is written,
predicts which keys matter — no attention weight is read. That is what makes it usable where the
card says H2O is not: behind a fused attention kernel that never materialises the weights.

kvpress scores each key ``-‖k‖₂`` and keeps the highest scores once, after the prompt (the model's
``knorm@B`` rows do that). This class is the same score in the card's decode-time mechanism, so it
can be stepped beside H2O on a captured trace: a position is admitted with its score and never
rescored, and eviction drops the lowest score — the largest norm — outside the protected window::

    on_decode_step(pos, attn):             # attn is not read
        admit(pos, score = -key_norm[pos])

    evict(budget):
        evictable = kept[: len(kept) - recentWindow]
        drop the `len(kept) - budget` lowest-scoring of those

Where it differs from kvpress, ours: it evicts as it reads (one position a step), with H2O's
recent window (32 by default; kvpress keeps none), and on a trace the norm is the one the trace
carries — for a trace that averages its layer's query heads, the mean over the layer's KV heads
(kvpress scores each KV head on its own). Equal norms evict the lower position.
"""

from __future__ import annotations

import numpy as np

from ..trace import check_key_norms
from .written_score import WrittenScorePolicy


class KeyNorm(WrittenScorePolicy):
    name = "key-norm"
    label = "K-norm"
    colour, line_style = "#665191", ("dash", "star", 9)  # on every chart
    score_label = "−key norm"
    reads_trace = ("key_norms",)
    scored_by = "by its key's norm"

    def __init__(
        self,
        budget: int = 512,
        recent_window: int | None = None,
        *,
        key_norms: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(budget, recent_window, rng=rng)
        self.take(key_norms, check_key_norms)

    def score_of(self, value: float) -> float:
        return -value  # the smallest norm scores highest
