"""The adaptive layer (:class:`h2o.bank.adaptive.AdaptiveLayer`): what its other tests leave out.

It is built only from fresh scored policies (a policy without comparable scores, or one that has
taken a step, even one emptied since, is refused with its own message); each head's ``evict``
returns that head's victims, ascending; a layer whose total is at most
:attr:`~h2o.bank.adaptive.AdaptiveLayer.FAST_VICTIMS` slots steps like its heads, keeping
everything while it fills; and the fast eviction refuses a state whose heads' own shares exceed
the room, as the sort (:func:`h2o.alloc.adaptive.ada_select`) does.
"""

from __future__ import annotations

import numpy as np
import pytest

from h2o.analysis import make_policy
from h2o.bank.adaptive import AdaptiveLayer
from h2o.policies import H2O


def layer(G: int, B: int, w: int, alpha: float) -> AdaptiveLayer:
    return AdaptiveLayer([H2O(G * B, recent_window=w) for _ in range(G)], B, alpha)


@pytest.mark.parametrize("name", ["streaming-llm", "sliding-window", "random"])
def test_a_policy_without_comparable_scores_is_refused_by_name(name) -> None:
    p = make_policy(name, 8, recent_window=2, sinks=2)
    with pytest.raises(ValueError, match="adaptive allocation needs scored policies, got "):
        AdaptiveLayer([H2O(8, recent_window=2), p], 4, 0.2)


def stepped() -> H2O:
    p = H2O(8, recent_window=2)
    p.on_decode_step(0, None)
    return p


def stepped_then_emptied() -> H2O:
    """A policy that has taken step 0 and dropped it: it keeps nothing, but is not fresh."""
    p = H2O(8, recent_window=0)
    p.on_decode_step(0, None)
    assert p.drop(1) == [0]
    assert len(p) == 0 and p.last_pos == 0
    return p


@pytest.mark.parametrize("used", [stepped, stepped_then_emptied])
def test_a_policy_that_has_taken_a_step_is_refused(used) -> None:
    with pytest.raises(ValueError) as info:
        AdaptiveLayer([H2O(8, recent_window=2), used()], 4, 0.2)
    assert str(info.value) == "adaptive allocation is built from fresh policies"


def test_each_heads_evict_returns_its_own_victims_ascending() -> None:
    """Stepped head by head: a head's victims are what it held (and the position just admitted)
    and no longer keeps; the last head's call evicts for the layer, the others' return theirs."""
    rng = np.random.default_rng(3)
    G, B, w = 3, 6, 1
    lay = layer(G, B, w, 0.2)
    total = 0
    for t in range(60):
        before = [set(h.kept.tolist()) | {t} for h in lay.heads]
        for h in lay.heads:
            n = len(h)
            h.on_decode_step(t, rng.dirichlet(np.full(n, 0.3)) if n else None)
        got = [h.evict() for h in reversed(lay.heads)][::-1]  # the last head evicts for all
        for h, b, v in zip(lay.heads, before, got, strict=True):
            assert v == sorted(b - set(h.kept.tolist())), t
            total += len(v)
        assert [h.evict() for h in lay.heads] == [[]] * G  # each head's victims, handed once
    assert total == G * 60 - G * B


@pytest.mark.parametrize(("G", "B", "w", "alpha"), [(1, 4, 1, 0.5), (2, 3, 1, 0.2), (2, 4, 0, 1)])
def test_a_layer_of_a_few_slots_steps_like_its_heads(G, B, w, alpha) -> None:
    """A total of at most ``FAST_VICTIMS`` slots: ``step`` keeps every position while the layer
    fills, then holds exactly the total, as each head's own step and evict."""
    assert G * B <= AdaptiveLayer.FAST_VICTIMS
    rng = np.random.default_rng(G * 100 + B)
    slow, fast = layer(G, B, w, alpha), layer(G, B, w, alpha)
    for t in range(30):
        sigs = []
        for h in slow.heads:
            n = len(h)
            sigs.append(rng.dirichlet(np.full(n, 0.5)).astype(np.float32) if n else None)
        for h, a in zip(slow.heads, sigs, strict=True):
            h.on_decode_step(t, a)
            h.evict()
        fast.step(t, sigs)
        for hs, hf in zip(slow.heads, fast.heads, strict=True):
            assert hf.last_pos == hs.last_pos == t
            assert np.array_equal(hs.kept, hf.kept), t
            assert hs.scores.tobytes() == hf.scores.tobytes(), t
            if G * (t + 1) <= G * B:
                assert hf.kept.tolist() == list(range(t + 1))
        assert sum(len(h) for h in fast.heads) == min(G * B, G * (t + 1))


def test_the_fast_eviction_refuses_what_the_sort_refuses() -> None:
    """Three heads of budget 5, window 4, ``alpha = 1``: head 0 holds one slot (inside its
    window), so each head's own share is ``5 - 1 = 4``; heads 1 and 2 hold 8 (4 evictable each),
    so their shares (8) exceed the room ``15 - (1 + 4 + 4) = 6``: both evictions refuse it."""
    state = [[0], list(range(10, 18)), list(range(20, 28))]
    layers = [layer(3, 5, 4, 1.0) for _ in range(2)]
    for lay in layers:
        for p, pos in zip(lay.inner, state, strict=True):
            p.resume(np.array(pos, np.int32), np.linspace(0.1, 0.9, len(pos)), 30)
    msg = r"^the heads' own shares \(8\) exceed the room \(6\)$"
    with pytest.raises(ValueError, match=msg):
        layers[0].evict()
    with pytest.raises(ValueError, match=msg):
        layers[1]._evict_fast()
