"""Attention over a KIVI-style cache in the middle of filling (:mod:`h2o.model.quant`).

In a chunk of the prefill, query ``t`` reads the keys and values the cache holds at step ``t``:
dequantized below a cut (the complete key groups; values older than the residual window), full
precision above it. The cut grows with ``t``, so a chunk's columns split into three parts: all
dequantized, all full precision, and a band between whose rows differ. Each key and value is
read once per row, by matmuls on blocks of rows — what a token-by-token decoder computes, up to
float32 rounding.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np


def _row_blocks(cut: np.ndarray, size: int = 32) -> list[tuple[int, int]]:
    """A chunk's rows in blocks ``[r0, r1)`` for :func:`mixed_scores`/:func:`mixed_values`:
    the runs of one ``cut`` when there are few (a key cut moves once a group), else ``size``
    rows at a time (a value cut moves every row)."""
    c = cut.shape[0]
    edges = np.flatnonzero(np.diff(cut)) + 1
    bounds = [0, *edges.tolist(), c] if len(edges) <= c // size else [*range(0, c, size), c]
    return list(pairwise(bounds))


def mixed_scores(
    qc: np.ndarray, kT: np.ndarray, kqT: np.ndarray, kv: int, cut: np.ndarray
) -> np.ndarray:
    """Scores ``(G, gs, c, kv)`` of a chunk's queries ``qc (G, gs, c, hd)`` where row ``i``
    reads the dequantized keys (``kqT``, ``(G, hd, keys)``) on columns ``j < cut[i]`` and the
    full-precision ones (``kT``) elsewhere. ``cut`` grows with the row, so the columns below
    its first value are all dequantized and those from its last value on all full precision:
    one matmul each, written in place. The band between goes by blocks of rows
    (:func:`_row_blocks`), each reading each key once; only the columns where a block's own
    cut moves need both (none for a run of one cut)."""
    G, gs, c, hd = qc.shape
    lo, hi = int(cut[0]), int(cut[-1])
    s = np.empty((G, gs, c, kv), dtype=np.float32)
    qf, sf = qc.reshape(G, gs * c, hd), s.reshape(G, gs * c, kv)
    if lo:
        np.matmul(qf, kqT[:, :, :lo], out=sf[:, :, :lo])
    np.matmul(qf, kT[:, :, hi:kv], out=sf[:, :, hi:])
    if hi > lo:
        kq4, k4 = kqT[:, None], kT[:, None]  # (G, 1, hd, keys): one per group of query heads
        for r0, r1 in _row_blocks(cut):
            a, b = int(cut[r0]), int(cut[r1 - 1])
            qb, sb = qc[:, :, r0:r1], s[:, :, r0:r1]
            if a > lo:
                np.matmul(qb, kq4[..., lo:a], out=sb[..., lo:a])
            if hi > b:
                np.matmul(qb, k4[..., b:hi], out=sb[..., b:hi])
            if b > a:
                sd, sk = np.matmul(qb, kq4[..., a:b]), np.matmul(qb, k4[..., a:b])
                sb[..., a:b] = np.where(np.arange(a, b) < cut[r0:r1, None], sd, sk)
    return s


def mixed_values(p: np.ndarray, v: np.ndarray, vq: np.ndarray, cut: np.ndarray) -> np.ndarray:
    """``p (G, gs, c, kv)`` times the values, row ``i`` reading the dequantized values ``vq``
    on columns ``j < cut[i]`` and the full-precision ``v`` elsewhere (the band scheme of
    :func:`mixed_scores`): ``(G, gs, c, hd)``."""
    G, gs, c, kv = p.shape
    lo, hi = int(cut[0]), int(cut[-1])
    pf = p.reshape(G, gs * c, kv)
    o = np.matmul(pf[:, :, hi:kv], v[:, hi:kv])
    if lo:
        o += np.matmul(pf[:, :, :lo], vq[:, :lo])
    o4 = o.reshape(G, gs, c, -1)
    if hi > lo:
        vq4, v4 = vq[:, None], v[:, None]
        for r0, r1 in _row_blocks(cut):
            a, b = int(cut[r0]), int(cut[r1 - 1])
            pb, ob = p[:, :, r0:r1], o4[:, :, r0:r1]
            if a > lo:
                ob += np.matmul(pb[..., lo:a], vq4[:, :, lo:a])
            if hi > b:
                ob += np.matmul(pb[..., b:hi], v4[:, :, b:hi])
            if b > a:
                sel = np.arange(a, b) < cut[r0:r1, None]
                band = pb[..., a:b]
                ob += np.matmul(np.where(sel, band, 0), vq4[:, :, a:b])
                ob += np.matmul(np.where(sel, 0, band), v4[:, :, a:b])
    return o4
