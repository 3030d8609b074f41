"""A replay's views of its record, each against its own definition, computed from the record.

``narrate`` (one sentence per step), ``protected_at`` (the recent window's first and last
position), ``score_grid`` / ``pooled_grid`` (the heatmaps: a score where a position was kept,
max-pooled when squeezed) and ``running_mean`` (over the steps where eviction is in force) are
what the app and the notebook draw. Each is checked here at every step, or at every cell, against
a brute-force reading of ``kept_at`` and ``victims_at``.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from h2o import H2O, TOVA, RandomEviction, SlidingWindow, StreamingLLM, canonical_trace, replay
from h2o import toy_trace as make_toy
from h2o.replay import replay_stepwise


@pytest.fixture(scope="module")
def toy():
    return make_toy()


class PairwiseH2O(H2O):
    """A policy of your own: H2O that, once over budget, evicts down to ``budget - 1`` — two
    victims every other step."""

    name = "pairwise-h2o"

    def evict(self, budget=None):
        if budget is None and len(self) <= self.budget:
            return []
        return super().evict(self.budget - 1 if budget is None else budget)


# -- narrate -----------------------------------------------------------------------------------
def test_narration_before_the_cache_is_full_counts_the_free_slots(toy):
    r = replay(StreamingLLM(4, sinks=1), toy)
    assert (
        r.narrate(2) == "step 2: position 2 admitted, 3 of 4 slots in use (1 free), nothing evicted"
    )
    # full: no "(0 free)"
    assert r.narrate(3) == "step 3: position 3 admitted, 4 of 4 slots in use, nothing evicted"
    h = replay(H2O(4, 2), toy)
    assert h.narrate(0) == (
        "step 0: position 0 admitted, 1 of 4 slots in use (3 free), nothing evicted; "
        "positions 0–0 are protected"
    )


def test_narration_of_the_ring_policies_names_the_oldest(toy):
    r = replay(StreamingLLM(4, sinks=1), toy)
    for t in range(4, toy.steps):
        ((v, _),) = r.victims_at(t)
        assert v == t - 3  # the oldest outside the sink
        assert (
            r.narrate(t)
            == f"step {t}: evicted position {v} — the oldest outside the 1 pinned sinks"
        )
    w = replay(SlidingWindow(4), toy)
    for t in range(4, toy.steps):
        assert w.narrate(t) == f"step {t}: evicted position {t - 4} — the oldest"


def test_narration_of_random_eviction_counts_the_evictable_positions(toy):
    r = replay(RandomEviction(4, recent_window=1, rng=np.random.default_rng(0)), toy)
    for t in range(4, toy.steps):
        ((v, _),) = r.victims_at(t)
        n = int(r.n_kept[t])
        assert n == 5
        assert r.narrate(t) == (
            f"step {t}: evicted position {v} — drawn at random from {n - 1} evictable "
            f"positions; positions {t}–{t} are protected"
        )


def test_narration_of_a_scored_policy_names_victims_scores_and_the_window(toy):
    r = replay(H2O(4, 2), toy)
    for t in range(4, toy.steps):
        ((v, s),) = r.victims_at(t)
        pos, _ = r.kept_at(t)
        assert r.narrate(t) == (
            f"step {t}: evicted position {v}, cumulative attention {s:.4g} — the lowest of 3 "
            f"evictable positions; positions {int(pos[-2])}–{t} are protected"
        )
    # Sinks pinned by a policy of your own are not evictable either: 5 kept - 2 - 1.
    sunk = dataclasses.replace(r, sinks=1)
    assert "the lowest of 2 evictable positions" in sunk.narrate(10)


def test_narration_of_several_victims_lists_them_all(toy):
    r = replay_stepwise(PairwiseH2O(4, 1), toy)
    several = [t for t in range(toy.steps) if len(r.victims_at(t)) == 2]
    assert several == list(range(4, toy.steps, 2))  # 5 kept -> 3, then 4, then 5 -> 3 ...
    for t in several:
        (a, sa), (b, sb) = r.victims_at(t)
        assert a < b
        assert r.narrate(t) == (
            f"step {t}: evicted positions {a}, {b}, cumulative attention {sa:.4g}, {sb:.4g} — "
            f"the lowest of {int(r.n_kept[t]) - 1} evictable positions; positions {t}–{t} are "
            "protected"
        )


def test_a_replay_without_its_record_refuses_its_views(toy):
    r = replay(H2O(4, 2), toy, record=False)
    for view in (r.kept_at, r.protected_at, r.narrate):
        with pytest.raises(ValueError) as e:
            view(5)
        assert str(e.value) == "this replay was run with record=False; no per-step scores kept"
    with pytest.raises(ValueError, match="record=False"):
        r.score_grid(0, 10)


# -- protected_at ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make", [lambda: H2O(6, 2), lambda: TOVA(5, 4), lambda: H2O(3, 0), lambda: StreamingLLM(4, 1)]
)
def test_the_protected_window_is_the_last_window_kept_positions(toy, make):
    r = replay(make(), toy)
    for t in range(toy.steps):
        pos, _ = r.kept_at(t)
        got = r.protected_at(t)
        if r.window == 0:
            assert got is None
            continue
        inside = pos[-r.window :]  # all of them while fewer are kept
        assert got == (int(inside[0]), int(inside[-1])) and got[1] == t


# -- the heatmaps -------------------------------------------------------------------------------
def brute_grid(r, start, stop, lo, hi, stride):
    """The definition: a cell holds the largest score of a position of its rows kept at its
    step, nan if none."""
    start, stop = max(0, start), min(r.steps, stop)
    hi = stop if hi is None else hi
    rows = max(1, -(-(hi - lo) // stride))
    grid = np.full((rows, max(stop - start, 0)), np.nan)
    for j, t in enumerate(range(start, stop)):
        for p, s in zip(*r.kept_at(t), strict=True):
            if lo <= p < hi:
                i = (int(p) - lo) // stride
                grid[i, j] = s if np.isnan(grid[i, j]) else max(grid[i, j], s)
    return grid


@pytest.mark.parametrize(
    ("start", "stop", "lo", "hi", "stride"),
    [
        (0, 40, 0, None, 1),  # the whole run, padding included (steps before the cache fills)
        (0, 12, 0, None, 1),
        (-5, 99, 0, None, 3),  # clamped to the run; max-pooled by three positions
        (3, 25, 4, 17, 1),  # a window of positions
        (3, 25, 4, 17, 2),
        (10, 30, 5, 7, 4),  # fewer positions than the stride: one row
        (0, 40, 0, 40, 40),
        (8, 8, 0, None, 1),  # no steps
        (20, 10, 0, 5, 1),
    ],
)
@pytest.mark.parametrize("make", [lambda: H2O(6, 2), lambda: StreamingLLM(8, 2)])
def test_score_grid_is_the_kept_scores_max_pooled(toy, start, stop, lo, hi, stride, make):
    r = replay(make(), toy)
    got = r.score_grid(start, stop, lo, hi, stride)
    want = brute_grid(r, start, stop, lo, hi, stride)
    assert got.shape == want.shape and got.dtype == np.float64
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("step_bins", "pos_bins"), [(40, 40), (100, 100), (10, 10), (7, 3), (1, 1), (40, 1), (1, 40)]
)
def test_pooled_grid_is_the_whole_run_max_pooled(toy, step_bins, pos_bins):
    r = replay(H2O(6, 2), toy)
    grid, sx, sy = r.pooled_grid(step_bins, pos_bins)
    assert sx == max(1, -(-toy.steps // step_bins)) and sy == max(1, -(-toy.steps // pos_bins))
    want = np.full((-(-toy.steps // sy), -(-toy.steps // sx)), np.nan)
    for t in range(toy.steps):
        for p, s in zip(*r.kept_at(t), strict=True):
            cell = (int(p) // sy, t // sx)
            want[cell] = s if np.isnan(want[cell]) else max(want[cell], s)
    assert grid.shape == want.shape and grid.shape[0] <= pos_bins and grid.shape[1] <= step_bins
    np.testing.assert_array_equal(grid, want)


# -- running_mean ------------------------------------------------------------------------------
@pytest.mark.parametrize("budget", [6, 40, 64])
def test_running_mean_is_nan_until_the_budget_then_the_mean_so_far(toy, budget):
    r = replay(H2O(budget, 2), toy)
    for name in ("mass", "recall", "oracle"):
        got = r.running_mean(name)
        assert got.dtype == np.float64 and got.shape == (toy.steps,)
        assert np.isnan(got[: min(budget, toy.steps)]).all()
        values = getattr(r, name)
        for t in range(budget, toy.steps):
            assert got[t] == pytest.approx(values[budget : t + 1].mean(), rel=1e-12)


def test_running_mean_on_a_long_run_ends_at_the_summary():
    trace = canonical_trace(steps=400)
    r = replay(H2O(64, 16), trace, record=False)
    s = r.summary()
    assert r.running_mean("mass")[-1] == pytest.approx(s["retained_mass"], rel=1e-12)
    assert r.running_mean("recall")[-1] == pytest.approx(s["top_k_recall"], rel=1e-12)
    assert s["steps_measured"] == 400 - 64 and s["evictions"] == 400 - 64


@pytest.mark.parametrize("budget", [40, 64])
def test_a_trace_that_fits_the_budget_has_nan_means_and_no_warning(toy, budget):
    r = replay(H2O(budget, 2), toy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "mean of an empty slice"
        s = r.summary()
        means = {name: r.running_mean(name) for name in ("mass", "recall", "oracle")}
    assert np.isnan([s["retained_mass"], s["top_k_recall"], s["oracle_mass"]]).all()
    assert s["evictions"] == 0 and s["steps_measured"] == 0
    assert all(np.isnan(m).all() for m in means.values())
