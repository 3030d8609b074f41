"""Attention over a half-quantized cache (:mod:`h2o.model.mixed`) against its definition, row
by row: query row ``i`` reads the dequantized key/value ``j`` when ``j < cut[i]``, else the full
one."""

from __future__ import annotations

import numpy as np
import pytest

from h2o.model.mixed import mixed_scores, mixed_values

G, GS, HD = 2, 3, 16


def cuts(kind: str, t0: int, c: int) -> np.ndarray:
    t = np.arange(t0, t0 + c)
    if kind == "keys":  # complete groups of 32
        return (t // 32) * 32
    if kind == "values":  # all but the newest 32
        return np.maximum(t - 32, 0)
    return np.full(c, (t0 // 2))  # one cut for every row


CASES = [(k, t0, c) for k in ("keys", "values", "flat") for t0, c in ((0, 40), (5, 1), (70, 100))]


@pytest.mark.parametrize(("kind", "t0", "c"), CASES)
def test_scores_and_values_are_the_row_by_row_definition(kind, t0, c):
    rng = np.random.default_rng(t0 + c)
    kv = t0 + c
    q = rng.standard_normal((G, GS, c, HD), dtype=np.float32)
    k = rng.standard_normal((G, kv, HD), dtype=np.float32)
    kq = k + rng.standard_normal((G, kv, HD), dtype=np.float32)  # far apart: a mix-up shows
    v = rng.standard_normal((G, kv, HD), dtype=np.float32)
    vq = v + rng.standard_normal((G, kv, HD), dtype=np.float32)
    p = rng.random((G, GS, c, kv), dtype=np.float32)
    cut = cuts(kind, t0, c)
    s = mixed_scores(q, k.transpose(0, 2, 1), kq.transpose(0, 2, 1), kv, cut)
    o = mixed_values(p, v, vq, cut)
    assert s.shape == (G, GS, c, kv) and o.shape == (G, GS, c, HD)
    for i in range(c):
        held = np.arange(kv) < cut[i]
        keys = np.where(held[None, :, None], kq, k)  # (G, kv, hd): what row i's cache holds
        vals = np.where(held[None, :, None], vq, v)
        want_s = np.einsum("gsd,gjd->gsj", q[:, :, i].astype(np.float64), keys)
        want_o = np.einsum("gsj,gjd->gsd", p[:, :, i].astype(np.float64), vals)
        assert np.allclose(s[:, :, i], want_s, rtol=1e-5, atol=1e-4), (kind, i)
        assert np.allclose(o[:, :, i], want_o, rtol=1e-5, atol=1e-4), (kind, i)
