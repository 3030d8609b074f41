"""Replay: what the policy is shown, and what is measured, step by step."""

from __future__ import annotations

import numpy as np
import pytest

from h2o import H2O, Policy, StreamingLLM, Trace, replay, toy_trace
from h2o.policies.base import ScoredPolicy


class Spy(ScoredPolicy):
    """Records what it is shown; evicts like H2O."""

    name = "spy"

    def __init__(self, budget, recent_window=1):
        super().__init__(budget, recent_window)
        self.seen = []

    def _accumulate(self, score, attn):
        score += attn

    def advance_trusted(self, pos, attn):  # what replay calls, past validation
        self.seen.append((pos, self.kept.copy(), None if attn is None else attn.copy()))
        super().advance_trusted(pos, attn)


@pytest.fixture(scope="module")
def toy():
    return toy_trace()


def test_policy_sees_the_row_restricted_to_its_kept_positions_and_renormalised(toy):
    spy = Spy(6, 2)
    replay(spy, toy)
    for t, kept, attn in spy.seen:
        assert attn.dtype == np.float32 and attn.shape == kept.shape
        if t:
            expected = toy.row(t)[kept]
            np.testing.assert_allclose(attn, expected / expected.sum(), rtol=1e-6)
            assert abs(attn.sum(dtype=np.float64) - 1) < 1e-6


def test_retained_mass_recall_and_oracle_by_hand(toy):
    r = replay(H2O(6, 2), toy, top_k=3)
    p = H2O(6, 2)
    for t in range(toy.steps):
        row = toy.row(t)
        kept = p.kept.copy()
        if t:
            assert r.mass[t] == pytest.approx(row[kept].sum(dtype=np.float64), abs=1e-12)
            top = toy.top_k(3)[t]
            top = top[top >= 0]
            assert r.recall[t] == pytest.approx(np.isin(top, kept).mean())
            best = np.sort(row)[::-1][:6].sum(dtype=np.float64)
            assert r.oracle[t] == pytest.approx(best, abs=1e-6)
        w = row[kept]
        m = w.sum(dtype=np.float64)
        p.on_decode_step(t, w / np.float32(m) if m > 0 else w)
        victims = p.evict()
        assert [v for v, _ in r.victims_at(t)] == victims
    assert r.mass[0] == 1.0 and r.recall[0] == 1.0


def test_summary_averages_over_steps_at_or_after_the_budget(toy):
    r = replay(H2O(6, 2), toy)
    s = r.summary()
    assert s["retained_mass"] == pytest.approx(r.mass[6:].mean())
    assert s["top_k_recall"] == pytest.approx(r.recall[6:].mean())
    assert s["oracle_mass"] == pytest.approx(r.oracle[6:].mean())
    assert s["evictions"] == toy.steps - 6
    np.testing.assert_allclose(r.mass[:6], 1.0, atol=1e-6)  # nothing evicted yet
    np.testing.assert_allclose(r.running_mean("mass")[-1], s["retained_mass"])


def test_summary_is_nan_when_the_trace_fits_the_budget(toy):
    s = replay(H2O(64, 2), toy).summary()
    assert np.isnan(s["retained_mass"]) and s["evictions"] == 0


def test_recorded_scores_are_the_state_before_eviction(toy):
    r = replay(H2O(6, 2), toy)
    p = H2O(6, 2)
    for t in range(toy.steps):
        w = toy.row(t)[p.kept]
        m = w.sum(dtype=np.float64)
        p.on_decode_step(t, w / np.float32(m) if m > 0 else w)
        pos, sc = r.kept_at(t)
        assert pos.tolist() == p.kept.tolist()
        assert sc.tolist() == p.scores.tolist()
        victims = p.evict()
        assert [v for v, _ in r.victims_at(t)] == victims
        for v, s in r.victims_at(t):
            assert s == sc[pos.tolist().index(v)]


def test_narration_names_victim_score_and_window(toy):
    r = replay(H2O(8, 2), toy)
    t = int(r.victim_step[5])
    v, s = r.victims_at(t)[0]
    text = r.narrate(t)
    assert text.startswith(f"step {t}: evicted position {v}")
    assert f"{s:.4g}" in text and "of 7 evictable" in text
    lo, hi = r.protected_at(t)
    assert f"positions {lo}–{hi} are protected" in text and hi == t
    assert "nothing evicted" in r.narrate(3)
    r2 = replay(StreamingLLM(8, sinks=1), toy)
    assert "oldest outside the 1 pinned sinks" in r2.narrate(20)


def test_narration_reads_what_picks_the_victim_from_the_class(toy):
    """A replay tells each eviction by its class's ``evicts_by``, not by the policy's name: a
    subclass under another name still evicts (and is told as evicting) the oldest."""
    from h2o import RandomEviction, SlidingWindow

    class MySinks(StreamingLLM):
        name, label = "my-sinks", "My sinks"

    for policy, said in [
        (StreamingLLM(8, sinks=1), "the oldest outside the 1 pinned sinks"),
        (SlidingWindow(8), "the oldest"),
        (MySinks(8, sinks=2), "the oldest outside the 2 pinned sinks"),
        (RandomEviction(8, 2, rng=np.random.default_rng(0)), "drawn at random from"),
        (H2O(8, 2), "the lowest of"),
    ]:
        r = replay(policy, toy)
        t = int(r.victim_step[0])
        assert r.evicts_by == type(policy).evicts_by
        assert said in r.narrate(t), (policy.label, r.narrate(t))


def test_a_class_naming_no_known_eviction_is_refused(toy):
    class Odd(StreamingLLM):
        name, evicts_by = "odd", "luck"

    with pytest.raises(ValueError, match=r"Odd.evicts_by is 'luck'"):
        replay(Odd(8), toy)


def test_score_grid_and_pooled_grid(toy):
    r = replay(H2O(6, 2), toy)
    grid = r.score_grid(10, 20)
    assert grid.shape == (20, 10)
    pos, sc = r.kept_at(15)
    np.testing.assert_array_equal(grid[pos, 5], sc)
    assert np.isnan(grid[:, 5]).sum() == 20 - len(pos)
    pooled, step_stride, pos_stride = r.pooled_grid(10, 10)
    assert pooled.shape == (-(-toy.steps // pos_stride), -(-toy.steps // step_stride))
    assert pooled.shape[0] <= 10 and pooled.shape[1] <= 10
    # max-pooling keeps the largest score anywhere in the run
    assert np.nanmax(pooled) == np.nanmax(r.kept_score)


def test_replay_refuses_used_policies_and_bad_top_k(toy):
    p = H2O(6, 2)
    p.on_decode_step(0, None)
    with pytest.raises(ValueError, match="fresh"):
        replay(p, toy)
    with pytest.raises(ValueError, match="top_k"):
        replay(H2O(6, 2), toy, top_k=0)


def test_record_false_keeps_metrics_and_victims(toy):
    a, b = replay(H2O(6, 2), toy), replay(H2O(6, 2), toy, record=False)
    np.testing.assert_array_equal(a.mass, b.mass)
    np.testing.assert_array_equal(a.victim_pos, b.victim_pos)
    assert b.kept_pos is None
    with pytest.raises(ValueError, match="record=False"):
        b.kept_at(3)


def test_replay_arrays_are_read_only(toy):
    r = replay(H2O(6, 2), toy)
    for a in (r.mass, r.recall, r.kept_pos, r.kept_score, r.victim_pos):
        assert not a.flags.writeable


def test_zero_mass_rows_are_passed_through_unnormalised():
    # Position 0 is evicted at step 2 (tie, lower position); step 3 attends only to it.
    rows = [np.zeros(0), np.ones(1), np.array([0.0, 1.0]), np.array([1.0, 0.0, 0.0])]
    tr = Trace.from_rows("z", rows)
    spy = Spy(2, 1)
    r = replay(spy, tr)
    assert r.victim_pos.tolist()[0] == 0
    assert r.mass[3] == 0.0
    assert spy.seen[3][2].tolist() == [0.0, 0.0]  # nothing to renormalise: shown as is


def test_policy_is_the_public_base():
    assert issubclass(H2O, Policy)


@pytest.mark.parametrize("top_k", [1, 7, 32, 10_000])
@pytest.mark.parametrize(
    "make", [lambda: H2O(40, 4), lambda: StreamingLLM(25, sinks=3), lambda: H2O(500, 0)]
)
def test_recall_is_the_share_of_each_rows_top_k_still_kept(top_k, make):
    """Recall by its definition — row t's top-k positions held before t is admitted, over
    min(k, t) — on a trace long enough for positions to sit in many rows' top k."""
    from h2o import canonical_trace

    trace = canonical_trace(steps=300)
    r = replay(make(), trace, top_k=top_k)
    p = make()
    for t in range(trace.steps):
        if t:
            top = trace.top_k(top_k)[t]
            top = top[top >= 0]
            assert r.recall[t] == np.isin(top, p.kept).sum() / min(top_k, t, trace.steps - 1)
        w = trace.row(t)[p.kept]
        m = w.sum(dtype=np.float64)
        p.on_decode_step(t, w / np.float32(m) if m > 0 else w)
        p.evict()
