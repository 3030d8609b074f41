"""KVzip — keep what the model reads while it repeats the text (Kim, Kim, Kwon, Park, Kim, Yun
and Song, 2025, "KVzip: Query-Agnostic KV Cache Compression with Context Reconstruction",
https://arxiv.org/abs/2505.23416; kvpress's ``KVzipPress``).

SnapKV keeps what the question attends to, so a second question finds what the first did not
need gone. KVzip chooses without any question: it feeds the model "Repeat the previous context
exactly." and the context again, and scores each position by the most attention it receives from
the queries of that reconstruction (over a KV head's query heads; the 4 sinks score 1). What the
model needs to say the text again is what any question about it may need.

Its authors compress once, after the whole context is read: the score needs the text's end
(every repeat query attends to the whole text). This class is that score in the card's
decode-time mechanism, so it can be stepped beside H2O on a captured trace — a position is
admitted with its score and never rescored; eviction drops the lowest outside the window::

    on_decode_step(pos, attn):             # attn is not read
        admit(pos, score = kvzip_score[pos])

    evict(budget):
        evictable = kept[: len(kept) - recentWindow]
        drop the `len(kept) - budget` lowest-scoring of those

Stepped token by token it therefore uses a score a decoder only has after the text's end
(:attr:`hindsight`): a reference for what a query-agnostic choice keeps, not a policy a decoder
could run. Ours: H2O's recent window (32 by default; kvpress keeps none) and, on a trace that
averages a layer's query heads, the mean over its KV heads (kvpress keeps a set per KV head, and
chooses over every layer and head at once: the model's ``kvzip@B`` rows do). Equal scores evict
the lower position.
"""

from __future__ import annotations

import numpy as np

from ..trace import check_kvzip_scores
from .written_score import WrittenScorePolicy


class KVzip(WrittenScorePolicy):
    name = "kvzip"
    label = "KVzip"
    colour, line_style = "#7744FF", ("dot", "triangle-down", 9)  # on every chart
    score_label = "reconstruction attention"
    reads_trace = ("kvzip_scores",)
    scored_by = "by the attention it receives while the model repeats the text"
    hindsight = (
        "KVzip's score is the attention a position receives while the model repeats the whole "
        "text, so stepped here it knows text not yet read; its authors compress once, after "
        "the text"
    )

    def __init__(
        self,
        budget: int = 512,
        recent_window: int | None = None,
        *,
        kvzip_scores: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__(budget, recent_window, rng=rng)
        self.take(kvzip_scores, check_kvzip_scores)
