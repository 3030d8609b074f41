"""H2O against its policy card, one rule at a time.

Each test names the card's sentence it pins. They are written from the card, not from the
implementation: where a rule could be broken in a plausible way (a float32 accumulator, an
unprotected newest position, victims in chosen order, ties to the higher position), a test shows
that breaking it fails.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from h2o import H2O
from h2o.reference import CardH2O


def step(p, pos, attn):
    p.on_decode_step(pos, None if attn is None else np.asarray(attn, dtype=np.float32))


def fill(p, n):
    """Admit positions 0..n-1 with no attention information."""
    for t in range(n):
        p.on_decode_step(t, None)


# -- "Scores accumulate in float64 while the weights arrive as float32." ------------------------
def float64_exactness(cls) -> bool:
    """1000 steps of float32 weights: are the scores exactly the float64 running sums?"""
    rng = np.random.default_rng(7)
    p = cls(budget=2048, recent_window=8)  # never over budget: nothing moves
    fill(p, 16)
    expected = [0.0] * 16
    for t in range(16, 1016):
        w = rng.dirichlet(np.ones(len(p))).astype(np.float32)
        for i, x in enumerate(w[:16]):
            expected[i] += float(x)  # Python floats are float64: the card's `score[i] += weight`
        p.on_decode_step(t, w)
    return list(p.scores[:16]) == expected


class Float32H2O(H2O):
    """A plausible mistake: accumulate in the dtype the weights arrive in."""

    def _accumulate(self, score, attn):
        score[:] = (score.astype(np.float32) + attn).astype(np.float64)


def test_scores_are_exact_float64_sums_over_a_thousand_steps():
    assert float64_exactness(H2O)


def test_a_float32_accumulator_fails_the_exactness_test():
    assert not float64_exactness(Float32H2O)


def last_victim_after_tiny_weights(cls) -> list[int]:
    """Positions 0 and 1 both get 1.0; then 0 keeps getting 2^-30, which float32 cannot add to 1.

    The newest position is evicted each step (score 0) until the end, when it gets weight 1 —
    as much as position 1 holds, and a tie evicts the lower position — so the choice falls
    between 0 and 1.
    """
    tiny = 2.0**-30
    p = cls(budget=3, recent_window=1)
    fill(p, 2)
    step(p, 2, [1.0, 1.0])
    for t in range(3, 9):
        step(p, t, [tiny, 0.0, 0.0])
        assert p.evict() == [t - 1]
    step(p, 9, [tiny, 0.0, 1.0])
    return p.evict()


def test_low_order_bits_decide_the_eviction():
    # float64: position 0 is ahead by 7 * 2^-30, so position 1 is the lowest.
    assert last_victim_after_tiny_weights(H2O) == [1]
    # float32: the tiny weights vanish, 0 and 1 tie, and the tie evicts the lower position.
    assert last_victim_after_tiny_weights(Float32H2O) == [0]


def test_scores_are_float64_and_weights_are_not_rounded_on_the_way_in():
    p = H2O(budget=4, recent_window=1)
    fill(p, 1)
    w = np.float32(0.1)
    step(p, 1, [w])
    assert p.scores.dtype == np.float64
    assert p.scores[0] == float(w)  # the float32 value widened exactly, not 0.1 and not rounded


# -- "on_decode_step: score[i] += weight; admit(pos, score = 0)" ------------------------------
def test_decode_step_adds_each_weight_to_its_aligned_slot_then_admits_with_zero():
    p = H2O(budget=8, recent_window=2)
    step(p, 0, [])
    step(p, 1, [1.0])
    step(p, 2, [0.25, 0.75])
    assert list(p.kept) == [0, 1, 2]
    assert list(p.scores) == [1.25, 0.75, 0.0]


# -- "evictable = kept[: len(kept) - recentWindow]" -------------------------------------------
def test_the_recent_window_is_never_evicted_even_with_the_lowest_scores():
    p = H2O(budget=4, recent_window=2)
    fill(p, 2)
    step(p, 2, [0.5, 0.5])
    step(p, 3, [0.5, 0.5, 0.0])
    step(p, 4, [0.5, 0.5, 0.0, 0.0])  # positions 2, 3 (and 4) have score 0
    # kept 0..4, window = {3, 4}; evictable = {0, 1, 2}: 2 is the lowest there
    assert p.evict() == [2]
    assert list(p.kept) == [0, 1, 3, 4]


def test_without_the_window_the_newest_position_is_evicted_every_step():
    """ "A token generated this step has accumulated nothing, so without protection it would be
    the first thing evicted every time and the cache would never advance.\""""
    p = H2O(budget=4, recent_window=0)
    rng = np.random.default_rng(0)
    fill(p, 4)
    for t in range(4, 20):
        p.on_decode_step(t, rng.dirichlet(np.ones(len(p))).astype(np.float32) + 1e-3)
        assert p.evict() == [t]
    assert list(p.kept) == [0, 1, 2, 3]
    q = H2O(budget=4, recent_window=1)
    fill(q, 4)
    for t in range(4, 20):
        q.on_decode_step(t, rng.dirichlet(np.ones(len(q))).astype(np.float32) + 1e-3)
        q.evict()
    assert q.kept[-1] == 19


# -- "drop the len(kept) - budget lowest-scoring of those" -----------------------------------
def test_eviction_drops_the_lowest_scoring_evictable_positions():
    p = H2O(budget=8, recent_window=1)
    fill(p, 6)
    step(p, 6, [0.30, 0.05, 0.20, 0.01, 0.40, 0.04])
    assert p.evict(budget=4) == [1, 3, 5]
    assert list(p.kept) == [0, 2, 4, 6]


# -- "Equal scores evict the lower position." -------------------------------------------------
def test_equal_scores_evict_the_lower_position():
    p = H2O(budget=8, recent_window=1)
    fill(p, 5)
    step(p, 5, [0.2, 0.2, 0.2, 0.2, 0.2])
    assert p.evict(budget=5) == [0]
    assert p.evict(budget=3) == [1, 2]


# -- "Victims are returned in ascending position order, not in the order they were chosen." ----
def test_victims_come_back_ascending_not_in_the_order_chosen():
    p = H2O(budget=8, recent_window=1)
    fill(p, 4)
    step(p, 4, [0.3, 0.1, 0.2, 0.4])  # argmin picks 1, then 2, then 0
    victims = p.evict(budget=2)
    assert victims == [0, 1, 2]
    assert list(p.kept) == [3, 4]


def test_matches_the_card_transcription_step_by_step():
    rng = np.random.default_rng(3)
    for budget, window in [(16, 4), (9, 0), (32, 31), (5, 1)]:
        p, ref = H2O(budget, window), CardH2O(budget, window)
        for t in range(300):
            w = rng.dirichlet(np.ones(len(p)) * 0.3).astype(np.float32) if len(p) else []
            p.on_decode_step(t, np.asarray(w, dtype=np.float32))
            ref.on_decode_step(t, [float(x) for x in w])
            b = int(rng.integers(window + 1, budget + 1))
            assert p.evict(b) == ref.evict(b)
            assert list(p.kept) == ref.kept
            assert list(p.scores) == ref.score  # bit-for-bit


# -- "recentWindow >= budget is refused" ------------------------------------------------------
@pytest.mark.parametrize(("budget", "window"), [(32, 32), (32, 33), (1, 1), (1, 5)])
def test_recent_window_at_or_above_budget_is_refused(budget, window):
    with pytest.raises(ValueError, match="recent_window"):
        H2O(budget=budget, recent_window=window)


def test_evicting_to_a_budget_the_window_fills_is_refused_and_changes_nothing():
    p = H2O(budget=8, recent_window=4)
    fill(p, 8)
    before = (list(p.kept), list(p.scores))
    with pytest.raises(ValueError, match="recent_window"):
        p.evict(budget=4)
    assert (list(p.kept), list(p.scores)) == before


def test_defaults_follow_the_paper_shape():
    p = H2O()
    assert (p.budget, p.recent_window) == (512, 32)


# -- "A null attn is read as 'no information this step' and leaves every score unchanged" ---
def test_null_attention_leaves_every_score_unchanged_and_still_admits():
    p = H2O(budget=8, recent_window=1)
    fill(p, 1)
    step(p, 1, [1.0])
    before = p.scores.copy()
    p.on_decode_step(2, None)
    assert list(p.scores[:2]) == list(before)
    assert list(p.kept) == [0, 1, 2]
    assert p.scores[2] == 0.0


# -- "The Rng is accepted at construction and never used" -----------------------------------
def test_rng_is_accepted_and_never_used():
    rng = np.random.default_rng(123)
    state = rng.bit_generator.state
    p = H2O(budget=8, recent_window=2, rng=rng)
    q = H2O(budget=8, recent_window=2)
    data = np.random.default_rng(0)
    for t in range(50):
        w = data.dirichlet(np.ones(len(p))).astype(np.float32) if len(p) else np.zeros(0)
        p.on_decode_step(t, w)
        q.on_decode_step(t, w)
        assert p.evict() == q.evict()
    assert rng.bit_generator.state == state


# -- Storage: "per slot, 4 bytes of position, 8 of score and 1 of eviction scratch" ----------
def test_storage_is_three_parallel_arrays_of_13_bytes_a_slot():
    p = H2O()
    assert p._pos.dtype == np.int32
    assert p._score.dtype == np.float64
    assert p._scratch.dtype == np.uint8
    assert p.nbytes_per_slot == 13
    total = p._pos.nbytes + p._score.nbytes + p._scratch.nbytes
    assert round(total / 1000, 1) == 6.7  # "about 6.7 KB at the default budget"


def _peak_during_decode(attn_dtype) -> tuple[int, int]:
    """Largest transient allocation of one decode step, and the net growth over 200 steps."""
    rng = np.random.default_rng(0)
    p = H2O(budget=1024, recent_window=32)
    for t in range(1100):
        p.on_decode_step(t, rng.random(len(p)).astype(attn_dtype))
        p.evict()
    inputs = [rng.random(1024).astype(attn_dtype) for _ in range(200)]
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        peak = 0
        for i, a in enumerate(inputs):
            tracemalloc.reset_peak()
            s0, _ = tracemalloc.get_traced_memory()
            p.on_decode_step(1100 + i, a)
            peak = max(peak, tracemalloc.get_traced_memory()[1] - s0)
            p.evict()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, end - start


def test_decode_step_allocates_nothing_per_step_for_float64_weights():
    # A temporary of the kept size would be 8 KB here; the bound catches any such array while
    # leaving room for the small objects of a Python call (views, scalars: about 1 KB).
    peak, growth = _peak_during_decode(np.float64)
    assert peak < 2048
    assert growth < 4096


def test_float32_weights_cost_only_numpys_transient_cast_buffer():
    # np.add widens float32 into the float64 scores through an internal buffer of the kept
    # size, freed at once; nothing of ours is allocated on top of it, and nothing persists.
    peak, growth = _peak_during_decode(np.float32)
    assert peak < 1024 * 8 + 2048
    assert growth < 4096


def test_state_does_not_grow_in_steady_state():
    p = H2O(budget=16, recent_window=4)
    rng = np.random.default_rng(0)
    arrays = (p._pos, p._score, p._scratch)
    for t in range(500):
        p.on_decode_step(t, rng.random(len(p)).astype(np.float32))
        p.evict()
    # the same preallocated arrays, never reallocated
    assert all(a is b for a, b in zip((p._pos, p._score, p._scratch), arrays, strict=True))
    assert len(p) == 16
