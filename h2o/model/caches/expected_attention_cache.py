"""Expected Attention (Devoto, Jeblick and Jégou, 2025, "Expected Attention: KV Cache
Compression by Estimating Attention from Future Queries Distribution",
https://arxiv.org/abs/2510.00636; kvpress's ``ExpectedAttentionPress``).

H2O scores a key by the attention it *has* received, so an old key has had more steps to
collect it (the age bias of the lesson's chapters 3–5). Expected Attention scores a key by the
attention the *next* queries are expected to give it. Queries before RoPE are close to Gaussian,
so the prompt's own queries give their mean and covariance, and the expectation has a closed
form::

    prefill the context (full attention)
    mu, Sigma = the mean and covariance of each query head's queries before RoPE, over the
                context's positions from n_sink on
    R         = the RoPE rotation averaged over the next 512 positions (after the context)
    mu, Sigma = R mu, R Sigma R^T
    z[j]      = k_j . mu / sqrt(d) + k_j^T Sigma k_j / (2 d)   (log E[exp(q . k_j / sqrt(d))]
                for q ~ N(mu, Sigma); k_j as cached, after RoPE)
    score[j]  = softmax_j(z) averaged over the KV head's query heads, times ||v_j||
    the first n_sink = 4 positions score max + 1 (always kept)
    keep     = the top (budget - q) scores of each head, q the question's tokens

Every default is kvpress's (``n_future_positions=512``, ``n_sink=4``, covariance and value norm
on, ``epsilon=0``). As kvpress runs it, the context is compressed once it has been prefilled
and the question is read after, through the compressed cache
(:class:`~h2o.model.caches.base.ContextCompression`: the needle prompt's question, its own
tokens, as kvpress separates them).
The queries' statistics are gathered while the context is read, so a prompt is read from its
start (it shares no prefix with another). Equal scores keep the higher position.
"""

from __future__ import annotations

import numpy as np

from h2o.model.caches.base import ContextCompression
from h2o.model.forward import apply_rope, rope_tables
from h2o.model.stack import cache_for
from h2o.policies.expected_attention import N_FUTURE, N_SINK, averaged_rope, expected_attention

#: The rule's defaults and rotation live with the decode-time policy; this file runs it once.
__all__ = [
    "N_FUTURE",
    "N_SINK",
    "ExpectedAttentionCache",
    "QueryStats",
    "averaged_rope",
    "expected_attention_scores",
    "top_keep",
]


def expected_attention_scores(
    keys: np.ndarray, values: np.ndarray, mu: np.ndarray, cov: np.ndarray
) -> np.ndarray:
    """One KV head's scores ``(C,)`` for its context's cached ``keys``, ``values`` ``(C, d)``
    from its query heads' rotated query mean ``mu`` ``(gs, d)`` and covariance ``cov``
    ``(gs, d, d)`` (:func:`~h2o.policies.expected_attention.expected_attention`, times each
    value's norm); the first :data:`N_SINK` positions score the maximum plus one."""
    k = np.asarray(keys, dtype=np.float64)[N_SINK:]
    v = np.asarray(values, dtype=np.float64)[N_SINK:]
    score = expected_attention(k, mu, cov) * np.linalg.norm(v, axis=1)
    return np.concatenate([np.full(min(N_SINK, len(keys)), score.max() + 1.0), score])


def top_keep(score: np.ndarray, n_keep: int) -> np.ndarray:
    """The ``n_keep`` highest scores' positions, ascending (equal scores: the higher position);
    every position if there are no more."""
    C = len(score)
    if n_keep >= C:
        return np.arange(C, dtype=np.int64)
    order = np.lexsort((-np.arange(C), -np.asarray(score)))
    return np.sort(order[:n_keep]).astype(np.int64)


class QueryStats:
    """The sums of each layer's query heads' queries before RoPE, and of their outer products,
    over the positions ``n_sink .. context - 1``, gathered as an attention hook while the
    context is read."""

    def __init__(self, cfg, context: int) -> None:

        H, d = cfg.n_heads, cfg.head_dim
        self.cfg, self.context = cfg, context
        self.s1 = np.zeros((cfg.n_layers, H, d))
        self.s2 = np.zeros((cfg.n_layers, H, d, d))
        self.count = np.zeros(cfg.n_layers, dtype=np.int64)
        self.cos, self.sin = rope_tables(np.arange(context), d, cfg.rope_base)

    def hook(self, ch) -> None:

        lo, hi = max(ch.start, N_SINK), min(ch.start + ch.rows, self.context)
        if hi <= lo:
            return
        q = ch.queries[:, lo - ch.start : hi - ch.start].astype(np.float64)
        # undo the rotation (the inverse rotates by minus the angle) and the 1/sqrt(d) scale
        q = apply_rope(q, self.cos[lo:hi], -self.sin[lo:hi]) * np.sqrt(self.cfg.head_dim)
        self.s1[ch.layer] += q.sum(axis=1)
        self.s2[ch.layer] += q.transpose(0, 2, 1) @ q  # each head's sum of outer products
        self.count[ch.layer] += hi - lo

    def rotated(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """``(mu, Sigma)`` of ``layer``'s query heads, rotated by :func:`averaged_rope`."""
        n = int(self.count[layer])
        mu = self.s1[layer] / n
        cov = self.s2[layer] / n - np.einsum("hd,he->hde", mu, mu)
        R = averaged_rope(self.cfg.head_dim, self.cfg.rope_base, self.context)
        return mu @ R.T, R @ cov @ R.T


class ExpectedAttentionCache(ContextCompression):
    """The context compressed once, to the budget less the question's tokens a head, by the
    attention the next queries are expected to pay each key."""

    kind = "expected-attention"
    decode_policy = "expected-attention"  # h2o/policies/expected_attention.py, every token
    closed_loop = True  # over a text: that policy, one eviction a token (ContextCompression)
    rank = 5
    colour = "#604848"
    marker = "diamond-tall"
    since_h2o = (
        "predicts the attention a key will receive from the queries to come, instead of "
        "summing what it received, so an old key has no head start"
    )

    def name(self) -> str:
        return "Expected Attention"

    def read_context(self, model, part, cache, quant):
        if cache.length:
            raise ValueError("expected-attention reads its context from the start")
        stats = QueryStats(model.config, len(part))
        model.read(part, cache_for(model.config, cache, quant=quant), attn_hook=stats.hook)
        return stats

    def choose(self, model, prompt, cache, context, seen=None):
        cfg, stats = model.config, seen
        n_keep = self.n_keep(prompt, context)
        if n_keep >= context:  # too short a context to score: every position is kept
            return [[np.arange(context)] * cfg.n_kv_heads for _ in range(cfg.n_layers)]
        kept = []
        for li in range(cfg.n_layers):
            mu, cov = stats.rotated(li)
            gs = cfg.group_size
            kept.append(
                [
                    top_keep(
                        expected_attention_scores(
                            cache.k[li, g, :context],
                            cache.v[li, g, :context],
                            mu[g * gs : (g + 1) * gs],
                            cov[g * gs : (g + 1) * gs],
                        ),
                        n_keep,
                    )
                    for g in range(cfg.n_kv_heads)
                ]
            )
        return kept

    def prompt_limit(self, n_tokens: int, question: int | None = None) -> int:
        return 0  # the queries' statistics are gathered from the context's first token
