"""The local attention band (h2o/model/band.py): widths by hand from a histogram, and the
histogram of a tiny model against its own attention."""

from __future__ import annotations

import numpy as np
import pytest

from h2o.model.band import age_histograms, band_widths


def test_band_widths_by_hand():
    # layer 0: 0.3 at age 1, 0.1 at ages 2..4; no sinks -> half of 1.0 is reached at width 3
    # layer 1: sinks take 0.6, so half of the other 0.4 (0.2) is reached at width 1
    # layer 2: never half: warmup + 1
    hist = np.array([[0.3, 0.1, 0.1, 0.1], [0.25, 0.05, 0.05, 0.05], [0.01, 0.01, 0.01, 0.01]])
    sink = np.array([0.0, 0.6, 0.0])
    assert band_widths(hist, sink, 0.5).tolist() == [3, 1, 5]
    assert band_widths(hist, sink, 0.3).tolist() == [1, 1, 5]
    with pytest.raises(ValueError, match="strictly between"):
        band_widths(hist, sink, 1.0)


@pytest.fixture(scope="module")
def model(tiny_smollm):
    return tiny_smollm


def test_the_histogram_is_the_models_own_attention(model):
    from tiny_model import token_ids

    ids = token_ids(80, seed=5)
    hist, sink = age_histograms(model, ids, warmup=40, sinks=2)
    seen = []

    def hook(ch):
        seen.append((ch.layer, ch.start, ch.prev_probs().mean(axis=0)))

    model.forward(ids, attn_hook=hook)
    L = model.config.n_layers
    want = np.zeros((L, 40))
    want_sink = np.zeros(L)
    for layer, start, p in seen:
        for r in range(p.shape[0]):
            t = start + r
            if t >= 40:
                for age in range(1, 41):
                    want[layer, age - 1] += p[r, t - age] / 40  # 40 queries: t = 40 .. 79
                want_sink[layer] += p[r, :2].sum() / 40
    np.testing.assert_allclose(hist, want, atol=1e-6)
    np.testing.assert_allclose(sink, want_sink, atol=1e-6)
    assert np.all(hist.sum(1) + sink <= 1 + 1e-5)
    with pytest.raises(ValueError, match="warmup"):
        age_histograms(model, ids, warmup=80)
