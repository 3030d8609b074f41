"""The Python replay (``replay_stepwise``: any policy, one step at a time through its own
methods) on what only it meets: policies of your own, including ones that break the contract."""

from __future__ import annotations

import numpy as np
import pytest

from h2o import H2O, RandomEviction, toy_trace
from h2o.replay import replay, replay_stepwise


class Hoarder(H2O):
    """Never evicts: breaks the contract that a step leaves at most ``budget + 1`` positions
    before the eviction."""

    name = "hoarder"

    def evict(self, budget=None):
        return []


class Flush(H2O):
    """Empties its cache at every eviction: after its first step it keeps nothing, yet it has
    taken a step."""

    name = "flush"

    def evict(self, budget=None):
        return self.drop(len(self)) if len(self) else []


def test_the_python_replay_refuses_a_used_policy_and_a_bad_top_k():
    trace = toy_trace()
    used = H2O(6, 2)
    used.on_decode_step(0, None)
    flushed = Flush(2, 0)
    flushed.on_decode_step(0, None)
    assert flushed.evict() == [0] and len(flushed) == 0 and flushed.last_pos == 0
    for p in (used, flushed):
        for run in (replay, replay_stepwise):
            with pytest.raises(ValueError) as e:
                run(p, trace)
            assert str(e.value) == "replay needs a fresh policy (this one has already taken steps)"
    for bad in (0, -1, 2.0, True, "3"):
        with pytest.raises(ValueError, match="top_k must be a positive integer"):
            replay_stepwise(H2O(6, 2), trace, top_k=bad)
    # the two replays share their defaults
    assert replay_stepwise(H2O(6, 2), trace).top_k == replay(H2O(6, 2), trace).top_k == 32


def test_a_policy_that_keeps_more_than_budget_plus_one_is_refused_when_recorded():
    trace = toy_trace()
    with pytest.raises(ValueError) as e:
        replay_stepwise(Hoarder(6, 2), trace)
    assert str(e.value) == "policy kept more than budget + 1 positions before evicting"
    r = replay_stepwise(Hoarder(6, 2), trace, record=False)  # nothing recorded: it runs
    assert r.n_kept.tolist() == list(range(1, trace.steps + 1))
    assert r.victim_pos.shape == (0,)
    everything = [trace.row(t).sum(dtype=np.float64) for t in range(1, trace.steps)]
    assert r.mass.tolist() == [1.0, *everything]  # it keeps every position


@pytest.mark.parametrize("record", [True, False])
def test_random_eviction_replays_as_its_instance_steps(record):
    """Random eviction runs in Python: its replay is the instance stepped by hand, with the
    same generator (victims, masses, fills; the victims' recorded scores are their zero)."""
    trace = toy_trace()
    r = replay(
        RandomEviction(6, recent_window=2, rng=np.random.default_rng(3)), trace, 4, record=record
    )
    p = RandomEviction(6, recent_window=2, rng=np.random.default_rng(3))
    steps, victims = [], []
    for t in range(trace.steps):
        w = trace.row(t)[p.kept]
        m = w.sum(dtype=np.float64)
        if t:
            assert r.mass[t] == m
        p.on_decode_step(t, w / np.float32(m) if m > 0 else w)
        assert r.n_kept[t] == len(p)
        for v in p.evict():
            steps.append(t)
            victims.append(v)
    assert r.victim_step.tolist() == steps and r.victim_pos.tolist() == victims
    assert r.victim_pos.dtype == np.int32 and r.victim_step.dtype == np.int32
    if record:
        assert (r.victim_score == 0).all()
    else:
        assert np.isnan(r.victim_score).all()
    assert r.victim_score.shape == (len(victims),)
