"""One replay as one compiled call (h2o/bank/lane.py) against the Python replay, bit for bit.

`h2o.replay` runs the library's own H2O, Scissorhands, TOVA, StreamingLLM and sliding window in a
compiled loop; `h2o.replay.replay_stepwise` is the same replay one Python step at a time through
the policy's own methods. Every array of the two results, and the policy each leaves behind, must
be equal: on hypothesis-made traces (ties, all-zero rows, tiny weights, long rows past numpy's
pairwise block) and on every shipped trace.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import h2o
from h2o import POLICIES, RandomEviction, Trace
from h2o.bank import lane
from h2o.replay import replay, replay_stepwise

FIELDS = (
    "mass",
    "recall",
    "oracle",
    "n_kept",
    "victim_step",
    "victim_pos",
    "victim_score",
    "kept_pos",
    "kept_score",
)
COMPILED = ("h2o", "scissorhands", "tova", "streaming-llm", "sliding-window")


def build(name: str, budget: int, w: int) -> h2o.Policy:
    cls = POLICIES[name]
    if name == "streaming-llm":
        return cls(budget, sinks=w)
    if name == "sliding-window":
        return cls(budget)
    return cls(budget, recent_window=w)


def same_replays(fast, slow, what: str) -> None:
    """Every per-step array of two replays equal, dtype and all (None where neither recorded)."""
    for f in FIELDS:
        x, y = getattr(fast, f), getattr(slow, f)
        if x is None or y is None:
            assert x is None and y is None, (what, f)
            continue
        np.testing.assert_array_equal(x, y, err_msg=f"{what} {f}", strict=True)


def assert_same(name: str, budget: int, w: int, trace: Trace, record: bool, top_k: int) -> None:
    a, b = build(name, budget, w), build(name, budget, w)
    fast = replay(a, trace, top_k, record=record)
    slow = replay_stepwise(b, trace, top_k, record=record)
    same_replays(fast, slow, f"{name} {budget} {w}")
    # the policy is left as the steps leave it: kept, scores, last position, and it goes on alike
    np.testing.assert_array_equal(a.kept, b.kept, strict=True)
    np.testing.assert_array_equal(a.scores, b.scores, strict=True)
    assert a.last_pos == b.last_pos and len(a) == len(b)
    n = len(a)
    attn = np.full(n, 1 / n, dtype=np.float32) if n else np.zeros(0, np.float32)
    for p in (a, b):
        p.on_decode_step(trace.steps, attn if p.reads_attention else None)
    assert a.evict() == b.evict()
    np.testing.assert_array_equal(a.kept, b.kept, strict=True)
    np.testing.assert_array_equal(a.scores, b.scores, strict=True)


def packed(rows: list[np.ndarray]) -> Trace:
    return Trace("h", np.concatenate([np.zeros(0, np.float32), *rows]).astype(np.float32))


@st.composite
def traces(draw) -> Trace:
    steps = draw(st.integers(2, 70))
    seed = draw(st.integers(0, 2**32 - 1))
    kind = draw(st.sampled_from(["dirichlet", "ties", "zeros", "tiny"]))
    rng = np.random.default_rng(seed)
    rows = []
    for t in range(1, steps):
        r = rng.dirichlet(np.ones(t) * 0.3)
        if kind == "ties":  # exact ties: the lower position goes
            r = np.round(r * 4) / 4
            r = r / r.sum() if r.sum() else np.full(t, 1 / t)
        elif kind == "tiny":  # weights below 2**-29: sums that depend on their order
            r[rng.random(t) < 0.5] = rng.random() * 1e-12
            r = r / r.sum()
        r = r.astype(np.float32)
        if kind == "zeros" and rng.random() < 0.3:
            r[:] = 0  # an all-zero row goes through unnormalised
            r[0] = 1.0  # (rows must sum to 1: the sink takes it, the kept rest sums to 0)
        rows.append(r)
    return packed(rows)


@settings(max_examples=120, deadline=None)
@given(
    traces(),
    st.sampled_from(COMPILED),
    st.integers(1, 40),
    st.integers(0, 39),
    st.booleans(),
    st.integers(1, 12),
)
def test_compiled_replay_is_the_python_replay(trace, name, budget, w, record, top_k):
    w = min(w, budget - 1) if name != "sliding-window" else 0
    assert_same(name, budget, max(w, 0), trace, record, top_k)


@pytest.mark.parametrize("name", COMPILED)
@pytest.mark.slow
def test_every_shipped_trace_at_several_budgets(name):
    from app import data

    for key in ("canonical", "stale-spike", "toy", *data.trace_files()):
        trace = data.load(key, {}).trace
        for budget in (2, 8, 64, 256, 1024):
            if budget > trace.steps + 1:
                continue
            w = {"h2o": 32, "scissorhands": 64, "tova": 1, "streaming-llm": 4}.get(name, 0)
            assert_same(name, budget, min(w, budget - 1), trace, budget == 64, 32)


def test_long_rows_sum_as_numpy_does():
    """The mass transcription against numpy's float64 sum of float32 rows: lengths around the
    pairwise block (128) and the cast buffer (8192)."""
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 8, 9, 127, 128, 129, 255, 256, 1000, 8191, 8192, 8193, 20_000):
        a = (rng.random(n) ** 9).astype(np.float32)
        assert lane._numpy_sum(a, n) == np.add.reduce(a, dtype=np.float64), n


def test_which_classes_compile():
    """The library's own five, and a subclass that keeps the card's mechanics (its rule is its
    parent's function, or its own); random eviction (its draws come from the instance's
    generator), a class that folds attention in numpy its own way, one with an eviction of its
    own and a rule numba cannot compile run the Python loop."""

    class Mine(h2o.H2O):
        name = "mine"

    class OwnNumpy(h2o.H2O):
        def _accumulate(self, score, attn):
            score += attn

    class OwnVictims(h2o.H2O):
        def _select(self, k, evictable):
            return list(range(k))

    class NumpyHeavy(h2o.H2O):
        @staticmethod
        def rule(score, attn, n):
            np.add(score, attn, out=score, where=attn > 0)  # `where=` is not numba's

    assert all(lane.lane_rule(build(n, 8, 1)) is not None for n in COMPILED)
    assert lane.lane_rule(Mine(8, 1)) is not None
    for cls in (RandomEviction, OwnNumpy, OwnVictims, NumpyHeavy):
        assert lane.lane_rule(cls(8, 1)) is None, cls
    trace = h2o.canonical_trace(steps=40)
    assert lane.replay_compiled(RandomEviction(8, 1), trace, 8, True) is None
    assert lane.replay_compiled(h2o.H2O(8, 1), trace, 8, True) is not None


def test_resume_refuses_a_policy_that_has_taken_steps():
    p = h2o.H2O(4, 1)
    p.on_decode_step(0, None)
    with pytest.raises(ValueError, match="fresh policy"):
        p.resume(np.array([0], np.int32), np.zeros(1), 0)
    q = h2o.StreamingLLM(4, sinks=1)
    with pytest.raises(ValueError, match="align"):
        q.resume(np.array([0, 1], np.int32), np.zeros(1), 1)


def test_warm_compiles_the_replay_loop_for_what_replay_passes():
    lane.warm()
    before = set(map(str, lane.replay_lane.signatures))
    trace = h2o.canonical_trace(steps=100)
    for name in COMPILED:
        for record in (False, True):
            replay(build(name, 16, 1), trace, 8, record=record)
    assert set(map(str, lane.replay_lane.signatures)) == before


class Halving(h2o.H2O):
    """A rule that is none of the card's: the old sum halves each step before the new weight is
    added. Written once; the instance and the compiled loops both run it."""

    name = "halving"
    bank = "scored"  # lanes of it run together

    @staticmethod
    def rule(score, attn, n):
        for i in range(n):
            score[i] = 0.5 * score[i] + attn[i]


@pytest.mark.parametrize("seed", range(4))
def test_the_loops_run_the_rule_a_class_declares(seed):
    """The compiled loops take the rule from the class (its ``rule`` function), not from a list
    of the library's rules: a new class's own rule replays, compiled, and in a lock-step bank as
    its instances do, bit for bit."""
    compiled = Halving.compiled_rule()
    assert compiled is not None and compiled.python is Halving.rule
    rng = np.random.default_rng(seed)
    trace = packed([rng.dirichlet(np.ones(t)).astype(np.float32) for t in range(1, 90)])
    fast = lane.replay_compiled(Halving(12, recent_window=3), trace, 8, True)
    slow = replay_stepwise(Halving(12, recent_window=3), trace, 8, record=True)
    assert fast is not None
    for f in FIELDS:
        x, y = getattr(fast, f), getattr(slow, f)
        if x is None or y is None:
            assert x is None and y is None, f
            continue
        np.testing.assert_array_equal(x, y, err_msg=f, strict=True)
    # and stepped in a scored bank's compiled loops, lane by lane equal to the instances
    from h2o.bank import ScoredBank

    lanes = [Halving(12, recent_window=w) for w in (0, 3, 6)]
    bank = ScoredBank([Halving(12, recent_window=w) for w in (0, 3, 6)])
    for t in range(1, 60):
        row = trace.row(t)
        for p in lanes:
            w = row[p.kept]
            p.on_decode_step(t, (w / np.float32(w.sum(dtype=np.float64))).astype(np.float32))
            p.evict()
        block = np.stack([row[bank[i].kept] for i in range(len(lanes))])
        block /= block.sum(axis=1, dtype=np.float64).astype(np.float32)[:, None]
        bank.on_decode_step(t, block)
        bank.evict()
        for i, p in enumerate(lanes):
            assert bank[i].kept.tolist() == p.kept.tolist(), (t, i)
            assert bank[i].scores.tobytes() == p.scores.tobytes(), (t, i)
