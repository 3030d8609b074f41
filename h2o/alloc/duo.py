"""Head classes, DuoAttention-style (after Xiao et al. 2024, "DuoAttention: Efficient
Long-Context LLM Inference with Retrieval and Streaming Heads", https://arxiv.org/abs/2410.10819).

Some heads retrieve: they look far back, at whatever the query needs. Most only stream: their
attention sits on the first few tokens (sinks) and the recent window. DuoAttention gives the
first kind a full cache and the second a StreamingLLM cache of sinks + window.

Not DuoAttention itself: the paper *learns* a gate per head by optimisation on synthetic
passkey-retrieval data and gives its retrieval heads the *full* cache (saving memory only on the
streaming heads). Here the heads are ranked by a measured attention share, and the retrieval heads
share what the streaming heads leave of a fixed total, so every allocation holds equal memory.

Rule here: each (layer, KV head) is scored on a calibration text by the share of its attention
that falls *outside* the sinks and the recent window (``shares``, highest = most retrieval-like;
:func:`h2o.model.allocation.head_shares` measures it). The top ``retrieval`` fraction of heads
(at least one) are "retrieval" heads, the rest "streaming" heads::

    streaming head:  sinks + window slots              (run as StreamingLLM)
    retrieval head:  (L G B - n_streaming (sinks + window)) / n_retrieval
                     rounded by largest remainder, the extra slots to the highest shares

so the split meets the total ``L G B`` exactly; a retrieval head runs the user's policy at its
budget (at or above the text's length it never evicts: the full cache). ``budget < sinks +
window`` is refused (the streaming heads alone would exceed the total).
"""

from __future__ import annotations

import numpy as np

from h2o.policies.base import check_int

from .base import Allocator, check_fraction, round_to_total

RETRIEVAL, STREAMING = "retrieval", "streaming"


class Duo(Allocator):
    name = "duo"
    label = "head classes (DuoAttention-style)"
    dash = "longdash"
    unlike_paper = (
        "DuoAttention learns a gate per head on synthetic passkey-retrieval data and gives its "
        "retrieval heads the full cache; here heads are ranked by their attention share outside "
        "sinks + window on a calibration text, and at equal total memory a retrieval head gets "
        "a larger but bounded budget, run by the chosen policy."
    )

    def __init__(self, retrieval: float = 0.5, sinks: int = 4, window: int = 32) -> None:
        self.retrieval = check_fraction("retrieval", retrieval)
        self.sinks = check_int("sinks", sinks, 0)
        self.window = check_int("window", window, 1)

    @property
    def streaming_budget(self) -> int:
        return self.sinks + self.window

    def params(self):
        return {"retrieval": self.retrieval, "sinks": self.sinks, "window": self.window}

    def _budgets(self, L, G, B, shares):
        if shares is None:
            raise ValueError(
                "duo needs shares: each head's attention share outside sinks + window on a "
                "calibration text (h2o.model.allocation.head_shares)"
            )
        S, N = self.streaming_budget, L * G
        if B < S:
            raise ValueError(
                f"duo needs budget >= sinks + window ({self.sinks} + {self.window} = {S}): "
                f"at budget {B} the streaming heads alone would exceed the total"
            )
        n_ret = min(N, max(1, int(np.ceil(self.retrieval * N - 1e-9))))
        flat = shares.reshape(-1)
        order = np.lexsort((np.arange(N), -flat))  # highest share first, ties to lower index
        budgets = np.full(N, S, dtype=np.int64)
        left = N * B - (N - n_ret) * S
        budgets[order[:n_ret]] = round_to_total(np.full(n_ret, left / n_ret), left)
        kinds = np.full(N, STREAMING, dtype=object)
        kinds[order[:n_ret]] = RETRIEVAL
        return budgets.reshape(L, G), {
            "kinds": kinds.reshape(L, G).astype(str),
            "params": self.params() | {"n_retrieval": n_ret, "streaming_budget": S},
        }
