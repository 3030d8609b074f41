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
from .base import ScoredPolicy


class KeyNorm(ScoredPolicy):
    name = "key-norm"
    label = "K-norm"
    colour, line_style = "#665191", ("dash", "star", 9)  # on every chart
    score_label = "−key norm"
    reads_attention = False
    reads_trace = ("key_norms",)

    def __init__(
        self,
        budget: int = 512,
        recent_window: int | None = None,
        *,
        key_norms: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(budget, recent_window, rng=rng)
        self._norms: np.ndarray | None = None
        if key_norms is not None:
            check_key_norms(key_norms)  # the trace's rules; kept at the precision given
            self._norms = np.asarray(key_norms, dtype=np.float64)

    def observe(self, trace: object) -> None:
        super().observe(trace)
        self._norms = trace.key_norms  # type: ignore[attr-defined]  # checked by the trace

    def _admission_score(self, pos: int) -> float:
        norms = self._norms
        if norms is None or pos >= norms.shape[0]:
            have = "no key norms" if norms is None else f"key norms for {norms.shape[0]} positions"
            raise ValueError(
                f"K-norm scores position {pos} by its key's norm and has {have}: give "
                "key_norms=… or replay a trace that carries them"
            )
        return -float(norms[pos])

    def _accumulate(self, score: np.ndarray, attn: np.ndarray) -> None:
        pass  # a key's score is fixed when it is written: attention is never read
