"""The adaptive layer (:class:`h2o.bank.adaptive.AdaptiveLayer`) against its specification.

Its fast eviction (one partition, then picks one at a time on ties or past a head's quota) must
choose what the sort (:func:`h2o.alloc.adaptive.ada_select` through ``evict``) chooses — here on
states the other tests reach rarely: a layer of one head, and ``alpha = 1`` (each head's own
share is its whole budget, so every head under its budget has a quota of zero). Its whole-layer
step must be each head's own step: a null signal leaves that head's scores unchanged, and every
head has taken the step's position.
"""

from __future__ import annotations

import numpy as np
import pytest

from h2o.bank.adaptive import AdaptiveLayer
from h2o.policies import H2O


def layer(G: int, B: int, w: int, alpha: float) -> AdaptiveLayer:
    return AdaptiveLayer([H2O(G * B, recent_window=w) for _ in range(G)], B, alpha)


def random_state(rng, G, B, w, trial):
    """Fills with ``1..8`` slots over the layer total, and scores spread, on a few values
    (ties at the cut) or ordered like old sums."""
    k = int(rng.integers(1, 9))
    # (a head holds at most its own budget, the layer total, plus the position just admitted)
    fills = np.minimum(rng.multinomial(G * B + k - G * w, np.ones(G) / G) + w, G * B + 1)
    if G > 1 and trial % 2:  # one head well over its budget, the others under theirs
        fills = np.full(G, B - 2)
        fills[int(rng.integers(G))] = B + 2 * (G - 1) + k
    vals = rng.random((G, G * B + 1))
    if trial % 3 == 1:
        vals = np.round(vals * 3) / 3
    elif trial % 3 == 2:
        vals = np.sort(vals, axis=1)[:, ::-1] + 0.1 * rng.random(vals.shape)
    state = []
    for g in range(G):
        n = int(fills[g])
        pos = np.sort(rng.choice(10_000, n, replace=False)).astype(np.int32)
        state.append((pos, vals[g, :n]))
    return state


@pytest.mark.parametrize(("G", "alpha"), [(1, 0.0), (1, 0.5), (3, 1.0), (2, 1.0), (3, 0.5)])
def test_fast_eviction_is_the_sort(G, alpha) -> None:
    rng = np.random.default_rng(G * 10 + int(alpha * 10))
    B, w = 24, 4
    for trial in range(600):
        state = random_state(rng, G, B, w, trial)
        layers = [layer(G, B, w, alpha) for _ in range(2)]
        for lay in layers:
            for p, (pos, score) in zip(lay.inner, state, strict=True):
                p.resume(pos, score, int(pos[-1]))
        layers[0].evict()
        layers[1]._evict_fast()
        for a, b in zip(layers[0].inner, layers[1].inner, strict=True):
            assert np.array_equal(a.kept, b.kept) and np.array_equal(a.scores, b.scores), trial
        assert sum(len(p) for p in layers[1].inner) == G * B


@pytest.mark.parametrize("G", [1, 3])
def test_a_layer_step_is_each_heads_own_step(G) -> None:
    """``step`` against each head's ``on_decode_step`` and ``evict``, with null signals (no
    information: scores unchanged) on some heads and steps."""
    rng = np.random.default_rng(G)
    B, w = 10, 2
    slow, fast = layer(G, B, w, 0.2), layer(G, B, w, 0.2)
    for t in range(80):
        sigs = []
        for h in slow.heads:
            n = len(h.kept)
            a = rng.dirichlet(np.full(n, 0.3)).astype(np.float32) if n else np.zeros(0, np.float32)
            sigs.append(None if (t + h.head) % 4 == 0 else a)
        for h, a in zip(slow.heads, sigs, strict=True):
            h.on_decode_step(t, a)
            h.evict()
        fast.step(t, sigs)
        for hs, hf in zip(slow.heads, fast.heads, strict=True):
            assert hf.last_pos == hs.last_pos == t
            assert np.array_equal(hs.kept, hf.kept)
            assert hs.scores.tobytes() == hf.scores.tobytes()  # float64, bit for bit
        assert sum(len(h) for h in fast.heads) == min(G * B, G * (t + 1))
