"""Expected Attention's rescoring interval (h2o/policies/expected_attention.py): every kept key is
rescored at the steps ``pos % rescore_every == 0`` and, in between, eviction reads the last
rescoring's scores (a position admitted since holds its admission score 0) — against a literal
transcription of that rule on random vectors; ``rescore_every=1`` is the rule rescored at every
step, exactly; and an interval that would let an unscored position be evicted is refused."""

from __future__ import annotations

import numpy as np
import pytest
from test_expected_attention_policy import literal_step_scores, random_trace, random_vectors

from h2o.policies import make_policy
from h2o.policies.base import ScoredPolicy
from h2o.policies.expected_attention import N_SINK, ExpectedAttention
from h2o.replay import replay
from h2o.trace_vectors import HeadVectors


def literal_interval_replay(vec: HeadVectors, steps: int, budget: int, window: int, every: int):
    """Admit with score 0; at ``pos % every == 0`` rescore every kept position by the rule at
    that step; then drop the lowest score outside the last ``window`` (ties: the lower position)
    while over budget. Returns each step's kept positions and scores before its eviction, and
    whether every victim had been scored by a rescoring since it was admitted."""
    kept: list[int] = []
    score: list[float] = []
    scored: set[int] = set()
    out, victims_scored = [], True
    for pos in range(steps):
        kept.append(pos)
        score.append(0.0)
        if pos % every == 0:
            score = literal_step_scores(vec, kept, pos)
            scored |= set(kept)
        out.append((list(kept), list(score)))
        while len(kept) > budget:
            i = min(range(len(kept) - window), key=lambda i: (score[i], kept[i]))
            victims_scored &= kept[i] in scored
            del kept[i], score[i]
    return out, victims_scored


@pytest.mark.parametrize(
    ("H", "G", "budget", "window", "every", "seed"),
    [
        (4, 2, 12, 3, 3, 0),
        (3, 1, 9, 4, 5, 1),  # the largest interval the window allows: window + 1
        (2, 2, 20, 8, 6, 2),
        (6, 3, 11, 6, 2, 3),
        (1, 1, 16, 2, 1, 4),
        (2, 1, 10, 0, 1, 5),  # no window: only every step
    ],
)
def test_replay_matches_the_literal_interval_rule(H, G, budget, window, every, seed) -> None:
    vec = random_vectors(70, H, G, 8, seed)
    run = replay(ExpectedAttention(budget, window, rescore_every=every), random_trace(vec, seed))
    steps, victims_scored = literal_interval_replay(vec, 70, budget, window, every)
    assert victims_scored  # the window bound keeps every unscored position out of reach
    for t, (kept, score) in enumerate(steps):
        n = int(run.n_kept[t])
        assert run.kept_pos[t, :n].tolist() == kept, f"step {t}"
        np.testing.assert_allclose(run.kept_score[t, :n], score, rtol=1e-9, err_msg=f"step {t}")


def test_between_rescorings_the_scores_stand_and_a_new_position_holds_0() -> None:
    vec = random_vectors(40, 2, 1, 8, 9)
    p = ExpectedAttention(30, 8, rescore_every=8, vectors=vec)
    for t in range(17):
        p.on_decode_step(t, None)
    at_16 = p.scores.copy()  # 16 % 8 == 0: rescored
    assert (at_16 > 0).all()
    for t in range(17, 24):
        p.on_decode_step(t, None)
        np.testing.assert_array_equal(p.scores[:17], at_16)
        assert (p.scores[17:] == 0).all()
    p.on_decode_step(24, None)
    assert (p.scores > 0).all() and not np.array_equal(p.scores[:17], at_16)


class EveryStep(ExpectedAttention):
    """The rule as it was before the interval: the statistics by numpy's outer product and a
    rescoring at every step."""

    def _step(self, pos: int, attn: np.ndarray | None) -> None:
        ScoredPolicy._step(self, pos, None)
        if pos >= N_SINK:
            q = self._vec.queries[pos].astype(np.float64)
            self._s1 += q
            self._s2 += q[:, :, None] * q[:, None, :]
            self._count += 1
        self._rescore(pos)


@pytest.mark.parametrize(("budget", "window", "seed"), [(12, 3, 0), (9, 0, 1), (20, 32, 2)])
def test_rescoring_every_step_is_the_every_step_rule_bit_for_bit(budget, window, seed) -> None:
    vec = random_vectors(60, 4, 2, 8, seed)  # held float32, as every HeadVectors
    trace = random_trace(vec, seed)
    window = min(window, budget - 1)
    got = replay(ExpectedAttention(budget, window, rescore_every=1), trace)
    want = replay(EveryStep(budget, window, rescore_every=1), trace)
    np.testing.assert_array_equal(got.kept_pos, want.kept_pos)
    np.testing.assert_array_equal(got.kept_score, want.kept_score)


def test_the_interval_defaults_to_the_recent_window() -> None:
    assert ExpectedAttention(64).rescore_every == 32  # H2O's window of 32
    assert ExpectedAttention(64, 5).rescore_every == 5
    assert ExpectedAttention(64, 0).rescore_every == 1  # no window: every step
    p = make_policy("expected-attention", 128)
    assert p.params() == {"budget": 128, "recent_window": 32, "rescore_every": 32}


@pytest.mark.parametrize(
    ("every", "match"),
    [
        (0, "rescore_every must be >= 1, got 0"),
        (-3, "rescore_every must be >= 1"),
        (2.0, "rescore_every must be an integer"),
        (True, "rescore_every must be an integer"),
        (10, r"rescore_every \(10\) must be at most recent_window \+ 1 \(9\)"),
    ],
)
def test_a_bad_interval_is_refused(every, match) -> None:
    with pytest.raises(ValueError, match=match):
        ExpectedAttention(64, 8, rescore_every=every)
    ExpectedAttention(64, 8, rescore_every=9)  # the bound itself is accepted
