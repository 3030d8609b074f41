"""SnapKV on the real model (Li et al., 2024, https://arxiv.org/abs/2404.14469): prefill the
prompt with the full cache, score each key once by the attention of the last ``window`` prompt
queries (:func:`h2o.policies.snapkv.snapkv_scores`, max-pooled), keep each head's top keys plus
the window under any budget allocation, then decode greedily.

It decides once, after the prompt, so it is not a decode-time policy: ``generate`` runs it, the
closed-loop perplexity refuses it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from h2o.alloc import Allocation
from h2o.alloc.adaptive import ada_select, guaranteed_slots
from h2o.alloc.duo import RETRIEVAL
from h2o.model.caches.fixed_keep import FixedKeep
from h2o.model.forward import AttnChunk, SmolLM
from h2o.model.generate import GenerationResult, check_prompt, decode_greedy
from h2o.model.kv_cache import KVCache
from h2o.model.stack import cache_for
from h2o.policies.snapkv import (
    DEFAULT_KERNEL,
    DEFAULT_WINDOW,
    SNAPKV,
    snapkv_keep,
    snapkv_scores,
)
from h2o.progress import Progress

if TYPE_CHECKING:
    from h2o.model.quant import QuantState


def snapkv_window_attention(
    model: SmolLM,
    prompt_ids: Sequence[int],
    cache: KVCache,
    window: int,
    progress: Progress | None = None,
    quant: QuantState | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Prefill ``prompt_ids`` into ``cache`` with the full cache (:meth:`SmolLM.read`); return
    the final hidden states of the tokens read and ``(n_layers, n_kv_heads, T)``: the attention
    each position got from the last ``window`` queries, summed over them and over each KV
    head's query heads. ``quant``: the prompt is read through a KIVI-style quantized cache
    (:mod:`h2o.model.quant`), nothing evicted. A cache that already holds the prompt's first
    tokens (none of the window's) is read on from there."""
    cfg = model.config
    T = len(prompt_ids)
    acc = np.zeros((cfg.n_layers, cfg.n_kv_heads, T))
    first = max(0, T - window)
    if cache.length > first:
        raise ValueError(f"the cache already holds {cache.length} tokens, past the window's first")

    def hook(ch: AttnChunk) -> None:
        lo = max(first - ch.start, 0)
        if lo >= ch.rows:
            return
        p = ch.probs[:, lo:, :].sum(axis=1, dtype=np.float64)  # (H, kv)
        g = p.reshape(cfg.n_kv_heads, cfg.group_size, -1).sum(axis=1)
        acc[ch.layer, :, : g.shape[1]] += g

    through = cache_for(model.config, cache, quant=quant)
    hidden = model.read(prompt_ids, through, attn_hook=hook, progress=progress)
    return hidden, acc


def snapkv_kept(
    window_attn: np.ndarray,
    allocation: Allocation,
    window: int = DEFAULT_WINDOW,
    kernel: int = DEFAULT_KERNEL,
    mode: str = "max",
) -> list[list[np.ndarray]]:
    """``kept[layer][kv_head]``: the positions SnapKV keeps under ``allocation`` (scores pooled
    by ``mode`` over ``kernel`` positions).

    Uniform / pyramid / duo retrieval heads: :func:`snapkv_keep` at the head's budget. Duo's
    streaming heads: the sinks and the last ``budget - sinks`` positions. Adaptive: per layer,
    :func:`h2o.alloc.ada_select` over the heads' pooled scores (each head its own top
    ``alpha (B - window)``, the rest of ``G (B - window)`` by score across heads), plus the
    window of every head.
    """
    L, G, T = window_attn.shape
    if allocation.shape != (L, G):
        raise ValueError(f"allocation shape {allocation.shape} != ({L}, {G})")
    scores = snapkv_scores(window_attn, window, kernel, mode)  # (L, G, T - window)
    B = allocation.budget
    out: list[list[np.ndarray]] = []
    for li in range(L):
        row: list[np.ndarray] = []
        if allocation.dynamic and G * B < G * T:
            if window >= B:
                raise ValueError(f"snapkv needs budget > window: budget {B}, window {window}")
            pos = np.arange(T - window)
            keep = ada_select(
                list(scores[li]),
                [pos] * G,
                G * (B - window),
                guaranteed_slots(allocation.alpha or 0.0, B, window),
            )
            tail = np.arange(T - window, T)
            row = [np.concatenate([k, tail]) for k in keep]
        else:
            for g in range(G):
                b = int(allocation.budgets[li, g])
                if allocation.kinds is not None and allocation.kinds[li, g] != RETRIEVAL:
                    s = min(int(allocation.params.get("sinks", 4)), b)
                    row.append(
                        np.unique(np.r_[np.arange(min(s, T)), np.arange(max(0, T - b + s), T)])
                    )
                else:
                    row.append(snapkv_keep(scores[li, g], b, T, window))
        out.append(row)
    return out


def check_snapkv(allocation: Allocation, n_prompt: int, window: int = DEFAULT_WINDOW) -> None:
    """Refuse an allocation that leaves a SnapKV head no room above its window (a budget at
    or below ``window`` that does not hold the whole prompt), naming the head."""
    streaming = allocation.kinds is not None
    for (li, g), b in np.ndenumerate(allocation.budgets):
        if streaming and allocation.kinds[li, g] != RETRIEVAL:  # type: ignore[index]
            continue
        if window >= b and b < n_prompt:
            raise ValueError(
                f"snapkv under {allocation.name}: layer {li}, KV head {g} gets {b} slots, not "
                f"above the window of {window}: lower the window or raise the budget"
            )


def snapkv_generate(
    model: SmolLM,
    prompt_ids: Sequence[int],
    allocation: Allocation,
    max_new: int = 20,
    window: int = DEFAULT_WINDOW,
    kernel: int = DEFAULT_KERNEL,
    progress: Progress | None = None,
    stop_strings: Sequence[str] = (),
    stop_at_eos: bool = True,
    label: str | None = None,
) -> GenerationResult:
    """SnapKV: full-cache prefill, one compression per (layer, KV head) from the last
    ``window`` prompt queries (pooled, ``kernel``), then greedy decoding that admits every new
    token. A budget at or above the prompt's length is the full cache, token for token."""
    prompt_ids = check_prompt(prompt_ids, max_new)
    t_start = time.perf_counter()
    cfg = model.config
    total = cfg.n_layers + max_new
    T = len(prompt_ids)
    cache = KVCache(cfg, T + max_new)
    pre = None if progress is None else (lambda d, _n, _w: progress(d, total, "prefill"))
    hidden, acc = snapkv_window_attention(model, prompt_ids, cache, window, pre)
    kept = snapkv_kept(acc, allocation, window, kernel)
    policies = [[FixedKeep(k, T - 1) for k in row] for row in kept]
    new_ids, stopped = decode_greedy(
        model, hidden, cache, policies, max_new, progress, stop_strings, stop_at_eos
    )
    return GenerationResult(
        label=label or f"{SNAPKV}/{allocation.name}@{allocation.budget}",
        prompt_tokens=T,
        new_ids=new_ids,
        text=model.decode(new_ids),
        seconds=time.perf_counter() - t_start,
        stopped=stopped,
    )
