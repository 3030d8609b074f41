"""A bank's replay off its fast paths: traces whose sums depend on their order (weights below
2**-29, so no compiled steady state) and rows whose kept weights are all zero.

Each lane is shown ``row(t)`` restricted to its kept positions and renormalised, in float32, as
:func:`h2o.replay` does it — and a row with no weight on the kept set goes through unnormalised.
Checked against each lane replayed on its own: masses, victims, and the float64 scores each
lane is left with, bit for bit; with lanes in lock-step (one budget) and lanes whose fills
differ (several budgets).
"""

from __future__ import annotations

import numpy as np
import pytest

from h2o import Trace, replay
from h2o.analysis import make_policy
from h2o.bank import make_bank, replay_bank
from h2o.bank.replay import _exact_sums


def lookback_trace(steps: int = 80, back: int = 4) -> Trace:
    """Row ``t`` puts its weight ``back`` and ``back + 1`` positions back (0.6 and 0.4), and a
    weight of 1e-12 just before those: lanes that have evicted some of the three see a part of
    the row, or a row of zeros."""
    dense = np.zeros((steps, steps))
    for t in range(1, steps):
        for k, w in enumerate((0.6, 0.4, 1e-12)):
            dense[t, max(0, t - back - k)] += w
    return Trace.from_dense("lookback", dense, normalize=True)


def tiny_trace(steps: int = 60) -> Trace:
    """Random rows with most weights far below 2**-29."""
    rng = np.random.default_rng(5)
    dense = rng.random((steps, steps)) ** 40
    dense[np.arange(1, steps), 0] += 1e-3
    return Trace.from_dense("tiny", dense, normalize=True)


@pytest.mark.parametrize("make", [lookback_trace, tiny_trace])
@pytest.mark.parametrize("name", ["h2o", "tova", "scissorhands"])
@pytest.mark.parametrize(
    "specs",
    [[(3, 0), (3, 1), (3, 2)], [(5, 0), (5, 2), (5, 4)], [(3, 1), (4, 1), (6, 2)]],
    ids=["lock-step", "lock-step 5", "fills differ"],
)
def test_rows_with_no_kept_weight_and_order_dependent_sums(make, name, specs):
    trace = make()
    assert not _exact_sums(trace)
    bank = make_bank([make_policy(name, b, recent_window=w) for b, w in specs])
    got = replay_bank(bank, trace, 4)
    for i, (r, (b, w)) in enumerate(zip(got, specs, strict=True)):
        p = make_policy(name, b, recent_window=w)
        want = replay(p, trace, 4, record=False)
        for f in ("mass", "recall", "n_kept", "victim_step", "victim_pos"):
            assert getattr(r, f).tobytes() == getattr(want, f).tobytes(), (i, f)
        assert bank[i].kept.tolist() == p.kept.tolist()
        assert bank[i].scores.tobytes() == p.scores.tobytes(), i  # float64, bit for bit


def test_the_lookback_trace_meets_the_cases():
    """In one step, one lane sees a row of zeros while another sees part of its row."""
    trace = lookback_trace()
    for name in ("h2o", "scissorhands"):
        masses = np.array(
            [
                replay(make_policy(name, 5, recent_window=w), trace, record=False).mass
                for w in (0, 2, 4)
            ]
        )
        zero, part = (masses == 0).any(axis=0), ((masses > 0) & (masses < 0.99)).any(axis=0)
        assert (zero & part).any(), name


def split_trace(steps: int = 24, early: int = 12) -> Trace:
    """Positions 1-3 take every row until ``early``; then half of each row goes to position 2
    and half six positions back (1e-12 on position 0 keeps the sums order-dependent). A lane of
    heavy hitters keeps position 2 and sees half its row; a lane with a window of 4 sees none."""
    dense = np.zeros((steps, steps))
    for t in range(1, steps):
        if t < early:
            for p, w in ((1, 0.5), (2, 0.3), (3, 0.2)):
                dense[t, min(p, t - 1)] += w
        else:
            dense[t, 2], dense[t, t - 6], dense[t, 0] = 0.5, 0.5, 1e-12
    return Trace.from_dense("split", dense, normalize=True)


def test_a_part_row_is_normalised_when_another_lane_sees_zeros():
    """At a step where one lane's kept weights are all zero, the other lane's part of the row
    is still divided by its own mass (only the zero row goes through unnormalised): the score
    it adds to position 2, which it keeps to the end, shows it."""
    trace = split_trace()
    assert not _exact_sums(trace)
    specs = [(5, 0), (5, 4)]
    bank = make_bank([make_policy("h2o", b, recent_window=w) for b, w in specs])
    got = replay_bank(bank, trace, 4)
    assert (got[0].mass[12:] < 0.6).all() and (got[1].mass[12:] == 0).all()  # the case is met
    for i, (b, w) in enumerate(specs):
        p = make_policy("h2o", b, recent_window=w)
        replay(p, trace, 4, record=False)
        assert bank[i].kept.tolist() == p.kept.tolist(), i
        assert bank[i].scores.tobytes() == p.scores.tobytes(), i
    assert 2 in bank[0].kept.tolist()
