"""Attention traces captured from the real model.

Trace-row semantics (shared with :mod:`h2o.trace`): row ``t`` has length ``t`` (row 0 is empty)
and is the attention of the query at position ``t`` over the *previous* positions ``0..t-1``,
summing to 1. The model's own causal softmax row of query ``t`` also covers ``t`` itself, so
we drop that self-weight and renormalise over ``0..t-1`` — equivalently, take the softmax of the
query's scores restricted to ``0..t-1``. That is what a cache of earlier tokens "receives" from
the query, and what a policy is shown at step ``t``. ``head="mean"`` averages these per-head rows
over all query heads. Each position's key norm (the L2 norm of its key, what K-norm scores) is
captured beside it: of the query head's KV head, or the mean over the KV heads for ``"mean"``;
and the heads' queries (before RoPE), keys and value norms (:class:`~h2o.trace_vectors.HeadVectors`:
what Expected Attention scores by), of the query head and its KV head, or of every head for
``"mean"``.

Where the attention goes (sinks / recent / middle, every layer) is in :mod:`h2o.model.layers`.
"""

from __future__ import annotations

import os
from typing import Any, Literal, NamedTuple

import numpy as np

from h2o.model.caches.kvzip_cache import reconstruction_scores
from h2o.model.forward import AttnChunk, AttnHook, SmolLM, apply_rope, rope_tables
from h2o.model.kv_cache import KVCache
from h2o.progress import Progress
from h2o.trace import Trace, save_trace
from h2o.trace_vectors import HeadVectors

Head = int | Literal["mean"]


class Capture(NamedTuple):
    """One captured trace: its dense rows, metadata, token strings, key norms and head vectors."""

    dense: np.ndarray
    meta: dict[str, Any]
    tokens: list[str]
    key_norms: np.ndarray
    vectors: HeadVectors | None = None
    kvzip_scores: np.ndarray | None = None


def kvzip_scores(model: SmolLM, ids: list[int], layer: int) -> np.ndarray:
    """``(n_kv_heads, T)``: each position's KVzip score in ``layer`` — the most attention it
    receives from the model's queries while it repeats the whole text
    (:func:`h2o.model.caches.kvzip_cache.reconstruction_scores`; the first 4 score 1). The text
    is read once more, then repeated: two passes beyond the capture's own."""
    cache = KVCache(model.config, len(ids))
    model.read(ids, cache)
    return reconstruction_scores(model, ids, cache, len(ids))[layer].astype(np.float32)


def head_kvzip(scores: np.ndarray, head: Head, n_heads: int) -> np.ndarray:
    """A trace's KVzip scores from :func:`kvzip_scores`: of query head ``head``'s KV head, or
    the mean over the KV heads for ``"mean"`` (as :func:`key_norms`)."""
    if head == "mean":
        return scores.mean(axis=0).astype(np.float32)
    return scores[head // (n_heads // scores.shape[0])]


class VectorsHook:
    """A forward hook keeping, for one layer, each position's queries before RoPE (unscaled),
    keys after RoPE and value norms in the query heads ``heads`` and the KV heads they read."""

    def __init__(self, model: SmolLM, layer: int, T: int, head: Head) -> None:
        cfg = model.config
        self.layer, self.cfg = layer, cfg
        self.heads = list(range(cfg.n_heads)) if head == "mean" else [int(head)]
        self.kv = sorted({h // cfg.group_size for h in self.heads})
        d = cfg.head_dim
        self.q = np.zeros((T, len(self.heads), d), dtype=np.float32)
        self.k = np.zeros((T, len(self.kv), d), dtype=np.float32)
        self.v = np.zeros((T, len(self.kv)), dtype=np.float32)

    def __call__(self, ch: AttnChunk) -> None:
        if ch.layer != self.layer or ch.queries is None or ch.keys is None or ch.values is None:
            return
        d, rows = self.cfg.head_dim, slice(ch.start, ch.start + ch.rows)
        cos, sin = rope_tables(np.arange(ch.start, ch.start + ch.rows), d, self.cfg.rope_base)
        # undo the rotation (minus the angle) and the 1/sqrt(d) scale the hook's queries carry
        q = apply_rope(ch.queries[self.heads].astype(np.float64), cos, -sin) * np.sqrt(d)
        self.q[rows] = q.transpose(1, 0, 2)
        self.k[rows] = ch.keys[self.kv].transpose(1, 0, 2)
        self.v[rows] = np.linalg.norm(ch.values[self.kv].astype(np.float64), axis=-1).T

    def vectors(self) -> HeadVectors:
        return HeadVectors(self.q, self.k, self.v, float(self.cfg.rope_base))


#: Position of the "layer story" split: sinks = the first 4 positions, recent = the last 64.
N_SINKS = 4
N_RECENT = 64


def check_head(model: SmolLM, head: Head) -> None:
    """Refuse anything but ``"mean"`` or a query head index of ``model``."""
    n_heads = model.config.n_heads
    if head != "mean" and not (isinstance(head, int) and 0 <= head < n_heads):
        raise ValueError(f"head must be 'mean' or an int in 0..{n_heads - 1}, got {head!r}")


def rows_hook(
    dense: np.ndarray, head: Head, layer: int | None = None, norms: np.ndarray | None = None
) -> AttnHook:
    """A forward hook writing trace rows (of ``head``) into ``dense``, shape ``(T, T)``, and
    with ``norms`` (shape ``(T,)``) each position's key norm (:func:`key_norms`).

    Row ``t`` gets the previous-position softmax in columns ``0..t-1``. With ``layer`` given,
    only that layer's chunks are written; otherwise every layer overwrites the rows in turn.
    """

    def hook(ch: AttnChunk) -> None:
        if layer is not None and ch.layer != layer:
            return
        pp = ch.prev_probs()
        sel = pp.mean(axis=0) if head == "mean" else pp[head]
        dense[ch.start : ch.start + ch.rows, : sel.shape[1]] = sel
        if norms is not None and ch.keys is not None:
            norms[ch.start : ch.start + ch.rows] = key_norms(ch.keys, head, pp.shape[0])

    return hook


def key_norms(keys: np.ndarray, head: Head, n_heads: int) -> np.ndarray:
    """Each row's key norm ``‖k‖₂`` from keys ``(n_kv_heads, rows, head_dim)``: of query head
    ``head``'s KV head, or for ``"mean"`` the mean over the KV heads (the trace's attention is
    the mean over query heads, which share the KV heads equally). RoPE rotates a key without
    changing its norm, so rotated or not gives the same."""
    norms = np.linalg.norm(keys.astype(np.float64), axis=-1)  # (n_kv_heads, rows)
    if head == "mean":
        return norms.mean(axis=0).astype(np.float32)
    return norms[head // (n_heads // keys.shape[0])].astype(np.float32)


def capture_meta(
    model: SmolLM,
    layer: int,
    head: Head,
    n_tokens: int,
    text: str | None = None,
    licence: str | None = None,
) -> dict[str, Any]:
    """The metadata of a captured trace of one layer (see :func:`capture_attention`)."""
    who = "mean over query heads" if head == "mean" else f"query head {head}"
    return {
        "kind": "captured",
        "source": f"{model.name} (numpy, {model.path.name}), layer {layer}, {who}",
        "model": model.name,
        "model_file": model.path.name,
        "layer": int(layer),
        "head": head if head == "mean" else int(head),
        "n_layers": model.config.n_layers,
        "n_heads": model.config.n_heads,
        "n_tokens": n_tokens,
        # An eighth of the context: eviction starts early and the policies separate (at 1024
        # tokens, budget 128: H2O keeps ~0.84 of layer 8's mass, StreamingLLM ~0.40).
        "suggested_budget": max(8, n_tokens // 8),
        "text": text or "unspecified",
        "licence": licence or "unspecified",
        "row_semantics": (
            "row t = softmax of query t over positions 0..t-1 (self-weight dropped, "
            "renormalised)" + (", mean over query heads" if head == "mean" else "")
        ),
        "key_norms": "L2 norm of each position's key"
        + (", mean over the KV heads" if head == "mean" else " in this query head's KV head"),
        "kvzip_scores": "most attention each position receives while the model repeats the "
        "whole text (KVzip)"
        + (", mean over the KV heads" if head == "mean" else " in this query head's KV head"),
    }


def capture_attention(
    model: SmolLM,
    ids: list[int],
    layer: int,
    head: Head = "mean",
    progress: Progress | None = None,
    text: str | None = None,
    licence: str | None = None,
    kvzip: bool = True,
) -> Capture:
    """Full-cache attention trace of one layer: ``(dense, meta, tokens, key_norms)``.

    ``dense`` is ``(T, T)`` float32 whose row ``t`` holds row(t) in columns ``0..t-1`` (zeros
    elsewhere); ``meta`` records ``model``, ``layer``, ``head``, ``text`` (where the text comes
    from), its ``licence``, ``n_tokens`` and a one-line ``source``; ``tokens`` are the readable
    token strings; ``key_norms`` each position's key norm (:func:`key_norms`); its head vectors,
    and with ``kvzip`` its KVzip scores (:func:`kvzip_scores`: two more passes, over every
    layer). Only layers ``0..layer`` are computed for the rest.
    """
    n_layers = model.config.n_layers
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in 0..{n_layers - 1}, got {layer}")
    check_head(model, head)
    ids = [int(i) for i in ids]
    T = len(ids)
    dense = np.zeros((T, T), dtype=np.float32)
    norms = np.zeros(T, dtype=np.float32)
    rows, vec = rows_hook(dense, head, layer, norms), VectorsHook(model, layer, T, head)

    def hook(ch: AttnChunk) -> None:
        rows(ch)
        vec(ch)

    model.forward(ids, attn_hook=hook, progress=progress, stop_after_layer=layer)
    meta = capture_meta(model, layer, head, T, text, licence)
    scores = (
        head_kvzip(kvzip_scores(model, ids, layer), head, model.config.n_heads) if kvzip else None
    )
    tokens = model.tokenizer.token_strings(ids)
    return Capture(dense, meta, tokens, norms, vec.vectors(), scores)


def trace_name(source: str, layer: int, head: Head) -> str:
    """Default trace name, e.g. ``lighthouse · L8 · mean``."""
    stem = os.path.splitext(os.path.basename(source))[0]
    return f"{stem} · L{layer} · {'mean' if head == 'mean' else f'head {head}'}"


def to_trace(
    name: str,
    dense: np.ndarray,
    meta: dict[str, Any],
    tokens: list[str],
    key_norms: np.ndarray | None = None,
    vectors: HeadVectors | None = None,
    kvzip_scores: np.ndarray | None = None,
) -> Trace:
    """Wrap a capture in the policy library's :class:`h2o.trace.Trace`."""
    return Trace.from_dense(
        name, dense, meta, tokens, key_norms=key_norms, vectors=vectors, kvzip_scores=kvzip_scores
    )


def save_capture(
    path: str | os.PathLike[str],
    name: str,
    dense: np.ndarray,
    meta: dict[str, Any],
    tokens: list[str],
    float16: bool = True,
    key_norms: np.ndarray | None = None,
    vectors: HeadVectors | None = None,
    kvzip_scores: np.ndarray | None = None,
) -> None:
    """Save a capture as an ``h2o-trace`` ``.npz`` (float16 weights and head vectors by default:
    half the size; rows are renormalised on load; the norms stay float32)."""
    trace = to_trace(name, dense, meta, tokens, key_norms, vectors, kvzip_scores)
    save_trace(trace, path, float16=float16)


def all_heads_attention(
    model: SmolLM,
    ids: list[int],
    layer: int,
    progress: Progress | None = None,
    text: str | None = None,
    licence: str | None = None,
) -> list[Capture]:
    """:func:`capture_attention` of every query head of ``layer`` from one forward pass: a
    :class:`Capture` per head (``n_heads`` ``(T, T)`` float32 buffers)."""
    n_layers = model.config.n_layers
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer must be in 0..{n_layers - 1}, got {layer}")
    ids = [int(i) for i in ids]
    T, H = len(ids), model.config.n_heads
    dense = np.zeros((H, T, T), dtype=np.float32)
    norms = np.zeros((H, T), dtype=np.float32)
    vecs = [VectorsHook(model, layer, T, h) for h in range(H)]

    def hook(ch: AttnChunk) -> None:
        for v in vecs:
            v(ch)
        if ch.layer == layer:
            pp = ch.prev_probs()
            dense[:, ch.start : ch.start + ch.rows, : pp.shape[2]] = pp
            for h in range(H):
                norms[h, ch.start : ch.start + ch.rows] = key_norms(ch.keys, h, H)

    model.forward(ids, attn_hook=hook, progress=progress, stop_after_layer=layer)
    tokens = model.tokenizer.token_strings(ids)
    kvzip = kvzip_scores(model, ids, layer)
    return [
        Capture(
            dense[h],
            capture_meta(model, layer, h, T, text, licence),
            tokens,
            norms[h],
            vecs[h].vectors(),
            head_kvzip(kvzip, h, H),
        )
        for h in range(H)
    ]
