"""Attention traces captured from the real model, and the per-layer "layer story" statistics.

Trace-row semantics (shared with :mod:`h2o.trace`): row ``t`` has length ``t`` (row 0 is empty)
and is the attention of the query at position ``t`` over the *previous* positions ``0..t-1``,
summing to 1. The model's own causal softmax row of query ``t`` also covers ``t`` itself, so
we drop that self-weight and renormalise over ``0..t-1`` — equivalently, take the softmax of the
query's scores restricted to ``0..t-1``. That is what a cache of earlier tokens "receives" from
the query, and what a policy is shown at step ``t``. ``head="mean"`` averages these per-head rows
over all query heads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from h2o.model.forward import AttnChunk, Progress, SmolLM

if TYPE_CHECKING:
    from h2o.trace import Trace

Head = int | Literal["mean"]

#: Position of the "layer story" split: sinks = the first 4 positions, recent = the last 64.
N_SINKS = 4
N_RECENT = 64


def _check_layer_head(model: SmolLM, layer: int, head: Head) -> None:
    cfg = model.config
    if not 0 <= layer < cfg.n_layers:
        raise ValueError(f"layer must be in 0..{cfg.n_layers - 1}, got {layer}")
    if head != "mean" and not (isinstance(head, int) and 0 <= head < cfg.n_heads):
        raise ValueError(f"head must be 'mean' or an int in 0..{cfg.n_heads - 1}, got {head!r}")


def capture_attention(
    model: SmolLM,
    ids: list[int],
    layer: int,
    head: Head = "mean",
    progress: Progress | None = None,
    text: str | None = None,
    licence: str | None = None,
) -> tuple[np.ndarray, dict[str, Any], list[str]]:
    """Full-cache attention trace of one layer: ``(dense, meta, tokens)``.

    ``dense`` is ``(T, T)`` float32 whose row ``t`` holds row(t) in columns ``0..t-1`` (zeros
    elsewhere); ``meta`` records ``model``, ``layer``, ``head``, ``text`` (where the text comes
    from), its ``licence``, ``n_tokens`` and a one-line ``source``; ``tokens`` are the readable
    token strings. Only layers ``0..layer`` are computed.
    """
    _check_layer_head(model, layer, head)
    ids = [int(i) for i in ids]
    T = len(ids)
    dense = np.zeros((T, T), dtype=np.float32)

    def hook(ch: AttnChunk) -> None:
        if ch.layer != layer:
            return
        pp = ch.prev_probs()
        sel = pp.mean(axis=0) if head == "mean" else pp[head]
        dense[ch.start : ch.start + ch.rows, : sel.shape[1]] = sel

    model.forward(ids, attn_hook=hook, progress=progress, stop_after_layer=layer)
    who = "mean over query heads" if head == "mean" else f"query head {head}"
    meta: dict[str, Any] = {
        "kind": "captured",
        "source": f"{model.name} (numpy, {model.path.name}), layer {layer}, {who}",
        "model": model.name,
        "model_file": model.path.name,
        "layer": int(layer),
        "head": head if head == "mean" else int(head),
        "n_layers": model.config.n_layers,
        "n_heads": model.config.n_heads,
        "n_tokens": T,
        # An eighth of the context: eviction starts early and the policies separate (at 1024
        # tokens, budget 128: H2O keeps ~0.84 of layer 8's mass, StreamingLLM ~0.40).
        "suggested_budget": max(8, T // 8),
        "text": text or "unspecified",
        "licence": licence or "unspecified",
        "row_semantics": (
            "row t = softmax of query t over positions 0..t-1 (self-weight dropped, "
            "renormalised)" + (", mean over query heads" if head == "mean" else "")
        ),
    }
    return dense, meta, model.tokenizer.token_strings(ids)


def trace_name(source: str, layer: int, head: Head) -> str:
    """Default trace name, e.g. ``lighthouse · L8 · mean``."""
    stem = os.path.splitext(os.path.basename(source))[0]
    return f"{stem} · L{layer} · {'mean' if head == 'mean' else f'head {head}'}"


def to_trace(name: str, dense: np.ndarray, meta: dict[str, Any], tokens: list[str]) -> Trace:
    """Wrap a capture in the policy library's :class:`h2o.trace.Trace`."""
    from h2o.trace import Trace

    return Trace.from_dense(name, dense, meta, tokens)


def save_capture(
    path: str | os.PathLike[str],
    name: str,
    dense: np.ndarray,
    meta: dict[str, Any],
    tokens: list[str],
    float16: bool = True,
) -> None:
    """Save a capture as an ``h2o-trace`` ``.npz`` (float16 by default: half the size; rows are
    renormalised on load)."""
    from h2o.trace import save_trace

    save_trace(to_trace(name, dense, meta, tokens), path, float16=float16)


@dataclass(frozen=True)
class LayerShares:
    """Per layer, where attention mass goes (trace-row semantics, queries ``t > 4 + 64``).

    ``sink`` = positions ``0..3``, ``recent`` = the last 64 positions before the query,
    ``middle`` = everything in between. Arrays are ``(n_layers,)`` (mean over heads and
    queries) and ``(n_layers, n_heads)`` for the per-head versions; the three sum to 1.
    """

    sink: np.ndarray
    recent: np.ndarray
    middle: np.ndarray
    sink_by_head: np.ndarray
    recent_by_head: np.ndarray
    middle_by_head: np.ndarray
    n_tokens: int
    n_queries: int


def layer_attention_shares(
    model: SmolLM,
    ids: list[int],
    progress: Progress | None = None,
    n_sinks: int = N_SINKS,
    n_recent: int = N_RECENT,
) -> LayerShares:
    """The "layer story" from one full prefill: share of attention on sinks / recent / middle.

    Only queries ``t > n_sinks + n_recent`` count, so that all three regions exist.
    """
    cfg = model.config
    ids = [int(i) for i in ids]
    first_q = n_sinks + n_recent + 1
    if len(ids) <= first_q:
        raise ValueError(f"need more than {first_q} tokens, got {len(ids)}")
    sums = np.zeros((3, cfg.n_layers, cfg.n_heads), dtype=np.float64)

    def hook(ch: AttnChunk) -> None:
        pos = ch.start + np.arange(ch.rows)
        sel = pos >= first_q
        if not sel.any():
            return
        pp = ch.prev_probs()[:, sel, :]  # (H, r, keys)
        t = pos[sel]
        cum = np.cumsum(pp, axis=2, dtype=np.float64)
        r = np.arange(t.shape[0])
        total = cum[:, r, t - 1]
        sink = cum[:, :, n_sinks - 1]
        recent = total - cum[:, r, t - n_recent - 1]
        sums[0, ch.layer] += sink.sum(axis=1)
        sums[1, ch.layer] += recent.sum(axis=1)
        sums[2, ch.layer] += (total - sink - recent).sum(axis=1)

    model.forward(ids, attn_hook=hook, progress=progress, stop_after_layer=cfg.n_layers - 1)
    n_q = len(ids) - first_q
    by_head = sums / n_q
    return LayerShares(
        sink=by_head[0].mean(axis=1),
        recent=by_head[1].mean(axis=1),
        middle=by_head[2].mean(axis=1),
        sink_by_head=by_head[0],
        recent_by_head=by_head[1],
        middle_by_head=by_head[2],
        n_tokens=len(ids),
        n_queries=n_q,
    )
