"""H2O in the authors' prefill mode (Zhang et al., NeurIPS 2023; their generation code,
``h2o_hf/utils_real_drop/modify_llama.py``, ``H2OKVCache_LayerWise``).

The card's rule evicts while it reads: every prompt token is a decode step, so a fact read once
in the middle of a prompt has to defend its slot, step by step, against everything read after it
while its score is still one row of attention. The authors' generation code reads the prompt
first and chooses after::

    prefill:  every prompt query attends to the whole prompt (full causal attention)
              score[j] = sum over prompt queries i of attn[i, j]       (self-attention included)
    choose:   keep = top (budget - recent) of score[0 : T - recent]  +  the last `recent`
              (only when T > budget; otherwise every position is kept)
    decode:   each step, the card's rule: add the step's attention, admit, evict the argmin
              outside the recent window

so a fact's score is every later prompt token's attention to it, counted before anything is
evicted. Two adaptations, named here: the authors keep a score per attention head, and SmolLM2
has grouped-query attention (9 query heads share 3 KV heads), so a KV head's score is the mean
over its query heads — the same signal the decode-time rule reads (:mod:`h2o.model.forward`);
and equal scores keep the higher position (the card's tie rule; ``torch.topk`` leaves ties
unspecified). The scores carry on into decoding in float64.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from h2o.model.forward import AttnChunk, SmolLM
from h2o.model.kv_cache import KVCache
from h2o.policies import make_policy


def keep_heavy_and_recent(score: np.ndarray, budget: int, recent: int) -> np.ndarray:
    """The authors' choice for one head: positions kept (ascending) from the prompt's
    accumulated ``score`` (length ``T``): every position if ``T <= budget``, else the top
    ``budget - recent`` scores before the last ``recent`` positions (equal scores: the higher
    position kept) and those ``recent``."""
    s = np.asarray(score, dtype=np.float64)
    n = s.shape[0]
    if n <= budget:
        return np.arange(n)
    if not 0 <= recent < budget:
        raise ValueError(f"recent ({recent}) must be 0 .. budget - 1 ({budget - 1})")
    head = s[: n - recent]
    pos = np.arange(head.shape[0])
    heavy = np.lexsort((-pos, -head))[: budget - recent]
    return np.concatenate([np.sort(heavy), np.arange(n - recent, n)])


def prompt_attention(
    model: SmolLM, prompt_ids: Sequence[int], cache: KVCache, acc: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Read the prompt with full attention into ``cache`` (:meth:`SmolLM.read`): the final
    hidden states of the tokens read and each position's accumulated attention ``(n_layers,
    n_kv_heads, T)`` float64 — the sum over every prompt query of its causal softmax (self
    included), the mean over the query heads of each KV head.

    A cache that already holds the prompt's first tokens is read on from there, adding to
    ``acc`` (what those tokens' queries accumulated; at least ``T`` positions long)."""
    cfg = model.config
    T = len(prompt_ids)
    G, gs = cfg.n_kv_heads, cfg.group_size
    if acc is None:
        acc = np.zeros((cfg.n_layers, G, T), dtype=np.float64)
    elif acc.shape[:2] != (cfg.n_layers, G) or acc.shape[2] < T:
        raise ValueError(f"acc must be ({cfg.n_layers}, {G}, >= {T}), got {acc.shape}")

    def hook(ch: AttnChunk) -> None:
        p = ch.probs.reshape(G, gs, ch.rows, -1)
        acc[ch.layer, :, : p.shape[-1]] += p.sum(axis=(1, 2), dtype=np.float64) / gs

    hidden = model.read(prompt_ids, cache, attn_hook=hook)
    return hidden, acc


def prefill_policies(acc: np.ndarray, budget: int, recent: int) -> list[list]:
    """``policies[layer][kv_head]``: an H2O at ``budget`` and ``recent`` per head, holding the
    positions :func:`keep_heavy_and_recent` keeps with their accumulated scores, ready to
    decode the token after the prompt."""
    L, G, T = acc.shape
    out = []
    for li in range(L):
        row = []
        for g in range(G):
            keep = keep_heavy_and_recent(acc[li, g], budget, recent)
            pol = make_policy("h2o", budget, recent_window=recent)
            pol.resume(keep.astype(np.int32), acc[li, g, keep], T - 1)
            row.append(pol)
        out.append(row)
    return out
