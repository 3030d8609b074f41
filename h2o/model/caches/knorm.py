"""K-norm (Devoto, Zhao, Scardapane and Minervini, EMNLP 2024, "A Simple and Effective L2
Norm-Based Strategy for KV Cache Compression", https://arxiv.org/abs/2406.11430; kvpress's
``KnormPress``).

The paper's observation: "a low L2 norm of the key embeddings usually leads to a high attention
score during decoding". So the cache can be compressed without reading a single attention
weight — the one signal H2O, TOVA and SnapKV cannot do without, and the one a fused attention
kernel (FlashAttention) never writes out::

    score[j] = -||k_j||_2          for every context position j, per KV head (kvpress:
                                   ``-keys.norm(dim=-1)``, keys as cached, after RoPE: a
                                   rotation keeps the norm)
    keep     = top (budget - w) context positions by score  +  the last w prompt tokens
    then decode, admitting every new token (no further eviction)

As kvpress runs it, the *context* is compressed once, after it has been prefilled, and the
question is read after, uncompressed. The needle grid's prompts end with their question, so
the last ``w = 32`` prompt tokens (the question and the chat turn; SnapKV's window here too) are
kept whole, as kvpress keeps the question; ``w`` is ours. Equal scores keep the higher position
(the card's tie rule; ``torch.topk`` leaves ties unspecified). A budget at or above the
prompt's length keeps everything; ``budget <= w`` is refused. Its budget is uniform (kvpress's
press compresses every head to the same ratio).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from h2o.model.caches.base import BUDGETED, Budgeted
from h2o.policies.snapkv import FixedKeep

#: The prompt's last tokens kept whole (the question, read uncompressed in kvpress's pipeline).
WINDOW = 32


def knorm_keep(keys: np.ndarray, budget: int, window: int = WINDOW) -> np.ndarray:
    """The positions one KV head keeps (ascending) from its cached ``keys`` ``(T, head_dim)``:
    every position if ``T <= budget``, else the ``budget - window`` context positions with the
    smallest key norm (equal norms: the higher position) and the last ``window``."""
    k = np.asarray(keys, dtype=np.float64)
    T = k.shape[0]
    if budget >= T:
        return np.arange(T, dtype=np.int64)
    score = -np.sqrt(np.einsum("td,td->t", k, k))[: T - window]
    # the highest scores first; among equal scores the higher position first
    order = np.lexsort((-np.arange(T - window), -score))
    chosen = order[: budget - window]
    return np.sort(np.concatenate([chosen, np.arange(T - window, T)])).astype(np.int64)


class Knorm(Budgeted):
    """The prompt compressed once to ``budget`` slots per KV head by its keys' norms."""

    kind = "knorm"
    closed_loop = False  # it compresses a prompt once: no perplexity over a text
    since_h2o = (
        "reads no attention weight, so it runs where a fused attention kernel never writes them "
        "out (H2O, TOVA and SnapKV cannot)"
    )

    @classmethod
    def parse_head(cls, head: str, label: str) -> dict[str, Any] | None:
        m = BUDGETED.match(head)
        if not m or m["name"] != "knorm":
            return None
        if m["opts"]:
            raise ValueError(f"row {label!r}: knorm takes no options")
        return {"policy": "knorm", "budget": int(m["budget"]), "allocation": m["alloc"]}

    def check(self) -> None:
        super().check()
        r = self.row
        if r.policy != "knorm":
            raise ValueError(f"a knorm row has no policy other than knorm: {r.policy!r}")
        if r.allocation is not None:
            raise ValueError("knorm compresses every head to the same budget (no allocation)")
        if int(r.budget) <= WINDOW:  # type: ignore[arg-type]
            raise ValueError(
                f"knorm's budget must exceed the {WINDOW} prompt tokens it keeps whole, got "
                f"{r.budget}"
            )
        if r.bits == 16:
            raise ValueError("a combination needs 2, 4 or 8 bits (16 is the policy alone)")

    def name(self) -> str:
        return "K-norm"

    def read_prompt(self, model, prompt, cache, quant, reading, calibration_ids=None):
        hidden = model.read(prompt, cache, quant=quant)  # no attention weights are read
        T, budget = len(prompt), int(self.row.budget)  # type: ignore[arg-type]
        kept = [
            [FixedKeep(knorm_keep(cache.k[li, g, :T], budget), T - 1) for g in range(ks.shape[0])]
            for li, ks in enumerate(cache.k[:, :, :T])
        ]
        return hidden, kept

    def prompt_limit(self, n_tokens: int) -> int:
        return n_tokens  # its choice reads only the cached keys: a shared beginning is shared
