"""SnapKV (Li et al. 2024, "SnapKV: LLM Knows What You are Looking for Before Generation",
https://arxiv.org/abs/2404.14469).

Every other policy here decides during decoding, blind to the question that ends the prompt.
SnapKV decides once, when the prompt has been read: the last ``w`` prompt queries (the
*observation window*, usually the question) already attend to what the answer will need. So::

    score[j] = sum over the last w queries (and the query heads of the KV head) of attn[q, j]
               for every prompt position j before the window
    score    = pool1d(score, kernel)         # stride 1, same length: keep the neighbours
                                             # of a hit (a fact is a phrase)
    keep     = top (budget - w) positions by score  +  the w window positions
    then decode, admitting every new token (no further eviction)

with ``w = 32``. Pooling differs between the authors' own runs, so rows name it
(:class:`h2o.model.rows.Row`): the released default (``init_snapkv``) is **average** pooling
with kernel 5 (``snapkv@B:avg5``); its LongBench configs use **max** pooling with kernel 7
(``snapkv@B:max7``); plain ``snapkv@B`` is max pooling with kernel 5, ours, kept because the
shipped results were computed with it.
Equal scores keep the higher position. A budget at or above the prompt's length keeps
everything; ``budget <= w`` is refused (no room for the selection).

:func:`snapkv_scores` and :func:`snapkv_keep` are the rule on plain arrays;
:func:`h2o.model.snapkv.snapkv_generate` runs it on the model, each head's kept set then
growing as :class:`h2o.model.caches.fixed_keep.FixedKeep` (every one-shot kind's decode side).
"""

from __future__ import annotations

import numpy as np

DEFAULT_WINDOW = 32
DEFAULT_KERNEL = 5
#: The one-shot policy's name: not stepped during the prompt, so only ``generate`` runs it.
SNAPKV = "snapkv"


def _check(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def pool1d(x: np.ndarray, kernel: int = DEFAULT_KERNEL, mode: str = "max") -> np.ndarray:
    """1-D pooling along the last axis, stride 1, padding ``kernel // 2``: same length.

    ``mode="max"``: the largest value in each window (padding never wins); ``"avg"``: the mean
    over ``kernel`` values, padding counted as zeros (torch's ``avg_pool1d`` default).
    """
    kernel = _check("kernel", kernel, 1)
    if kernel % 2 == 0:
        raise ValueError(f"kernel must be odd (a window centred on each position), got {kernel}")
    if mode not in ("max", "avg"):
        raise ValueError(f"mode must be 'max' or 'avg', got {mode!r}")
    x = np.asarray(x, dtype=np.float64)
    r, n = kernel // 2, x.shape[-1]
    pad = [(0, 0)] * (x.ndim - 1) + [(r, r)]
    xp = np.pad(x, pad, constant_values=-np.inf if mode == "max" else 0.0)
    win = np.lib.stride_tricks.sliding_window_view(xp, kernel, axis=-1)[..., :n, :]
    return win.max(axis=-1) if mode == "max" else win.sum(axis=-1) / kernel


def snapkv_scores(
    window_attn: np.ndarray,
    window: int = DEFAULT_WINDOW,
    kernel: int = DEFAULT_KERNEL,
    mode: str = "max",
) -> np.ndarray:
    """Pooled scores of the prompt positions before the window.

    ``window_attn`` is ``(..., T)``: the attention each prompt position got from the last
    ``window`` queries, already summed over them (and over the query heads of a KV head).
    Returns ``(..., T - window)`` float64.
    """
    window = _check("window", window, 1)
    a = np.asarray(window_attn, dtype=np.float64)
    T = a.shape[-1]
    if window >= T:
        return np.zeros((*a.shape[:-1], 0))
    return pool1d(a[..., : T - window], kernel, mode)


def snapkv_keep(scores: np.ndarray, budget: int, n_prompt: int, window: int = DEFAULT_WINDOW):
    """Positions kept (ascending) from one head's pooled ``scores`` (length ``n_prompt -
    window``): the top ``budget - window`` by score (ties: the higher position), plus the
    window. ``budget >= n_prompt`` keeps every position."""
    budget, window = _check("budget", budget, 1), _check("window", window, 1)
    if budget >= n_prompt:
        return np.arange(n_prompt)
    if budget <= window:
        raise ValueError(
            f"snapkv needs budget > window: budget {budget}, window {window} leaves no room "
            "for the positions the question points at"
        )
    s = np.asarray(scores, dtype=np.float64)
    if s.shape != (n_prompt - window,):
        raise ValueError(f"scores must have length {n_prompt - window}, got {s.shape}")
    pos = np.arange(s.shape[0])
    best = np.lexsort((-pos, -s))[: budget - window]
    return np.concatenate([np.sort(best), np.arange(n_prompt - window, n_prompt)])
