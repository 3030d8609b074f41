"""K-norm (Devoto, Zhao, Scardapane and Minervini, EMNLP 2024, "A Simple and Effective L2
Norm-Based Strategy for KV Cache Compression", https://arxiv.org/abs/2406.11430; kvpress's
``KnormPress``).

The paper's observation: "a low L2 norm of the key embeddings usually leads to a high attention
score during decoding". So the cache can be compressed without reading a single attention
weight. H2O, TOVA and SnapKV all read one; a fused attention kernel (FlashAttention) never writes
the weights out, which rules out H2O's sum of every weight at every step, while SnapKV and TOVA
recompute the few queries' weights they read (kvpress's ``compute_window_attention``)::

    prefill the context (full attention)
    score[j] = -||k_j||_2          for every context position j, per KV head (kvpress:
                                   ``-keys.norm(dim=-1)``, keys as cached, after RoPE: a
                                   rotation keeps the norm)
    keep     = the top (budget - q) scores of each head, q the question's tokens
    then read the question and decode, admitting every new token (no further eviction)

As kvpress runs it, the context is compressed once it has been prefilled and the question is
read after, through the compressed cache
(:class:`~h2o.model.caches.base.ContextCompression`: the needle prompt's question, its own
tokens, as kvpress separates them). Every head keeps the same number (kvpress's press
compresses each head to the same ratio). Equal scores keep the higher position (the card's tie
rule; ``torch.topk`` leaves ties unspecified).
"""

from __future__ import annotations

import numpy as np

from h2o.model.caches.base import ContextCompression


def knorm_keep(keys: np.ndarray, n_keep: int) -> np.ndarray:
    """The positions one KV head keeps (ascending) from its context's cached ``keys``
    ``(C, head_dim)``: the ``n_keep`` with the smallest L2 norm (equal norms: the higher
    position), every position if there are no more."""
    k = np.asarray(keys, dtype=np.float64)
    C = k.shape[0]
    if n_keep >= C:
        return np.arange(C, dtype=np.int64)
    score = -np.sqrt(np.einsum("td,td->t", k, k))
    # the highest scores first; among equal scores the higher position first
    order = np.lexsort((-np.arange(C), -score))
    return np.sort(order[:n_keep]).astype(np.int64)


class KnormCache(ContextCompression):
    """The context compressed once, to the budget less the question's tokens a head, by its
    keys' norms."""

    kind = "knorm"
    rank = 3
    decode_policy = "key-norm"  # h2o/policies/key_norm.py: the same score, at every token
    closed_loop = True  # over a text: that policy, one eviction a token (ContextCompression)
    colour = "#FF9DA7"
    marker = "square"
    since_h2o = (
        "reads no attention weight, so it runs behind a fused attention kernel, which never writes "
        "the weights out: H2O, which adds up every weight of every step, cannot (SnapKV and TOVA "
        "recompute the few queries' weights they read)"
    )

    def name(self) -> str:
        return "K-norm"

    def choose(self, model, prompt, cache, context, seen=None):
        n_keep = self.n_keep(prompt, context)
        return [
            [knorm_keep(heads[g, :context], n_keep) for g in range(heads.shape[0])]
            for heads in cache.k
        ]
