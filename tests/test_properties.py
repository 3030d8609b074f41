"""Property tests: invariants that hold for every policy on any sequence of steps."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from h2o import POLICIES
from h2o.reference import CardH2O

#: The methods that read attention alone (K-norm reads key norms: tests/test_key_norm_policy.py).
NAMES = [n for n, cls in POLICIES.items() if not cls.reads_trace]
POLICY_ARGS = st.sampled_from(NAMES).flatmap(
    lambda name: st.integers(2, 24).flatmap(
        lambda budget: st.tuples(
            st.just(name),
            st.just(budget),
            st.integers(0, budget - 1),  # recent_window (or sinks)
        )
    )
)


def build(name, budget, w):
    cls = POLICIES[name]
    if name == "streaming-llm":
        return cls(budget, sinks=w)
    if name == "sliding-window":
        return cls(budget)
    if name == "random":
        return cls(budget, recent_window=w, rng=np.random.default_rng(w))
    return cls(budget, recent_window=w)


# One step: attention kind (weights / None / a bad vector), and the budget to evict to (or skip).
STEP = st.tuples(
    st.sampled_from(["weights", "weights", "weights", "none", "bad"]),
    st.integers(0, 2**32 - 1),
    st.one_of(st.none(), st.integers(1, 30), st.just("default")),
)


def weights(rng, n, kind):
    if kind == "none":
        return None
    w = rng.dirichlet(np.ones(n) * 0.4).astype(np.float32) if n else np.zeros(0, np.float32)
    if n and rng.random() < 0.3:  # exact ties are where tie-breaking shows
        w = np.round(w * 4) / 4
    if kind == "bad":
        choice = rng.integers(5)
        if choice == 0:
            return np.ones(n + 1, np.float32)
        if n == 0:
            return np.ones(1, np.float32)
        w = w.copy()
        w[rng.integers(n)] = [np.nan, np.inf, -0.5, 1e30][choice - 1]  # 1e30: no softmax output
    return w


@settings(max_examples=150, deadline=None)
@given(POLICY_ARGS, st.lists(STEP, min_size=1, max_size=80))
def test_invariants_hold_on_any_sequence(args, steps):
    name, budget, w = args
    p = build(name, budget, w)
    window = getattr(p, "recent_window", 0)
    sinks = getattr(p, "sinks", 0)
    pos = 0
    for kind, seed, evict_to in steps:
        rng = np.random.default_rng(seed)
        attn = weights(rng, len(p), kind)
        before = (p.kept.tolist(), p.scores.tolist())
        if kind == "bad":
            try:
                p.on_decode_step(pos, attn)
            except ValueError:
                assert (p.kept.tolist(), p.scores.tolist()) == before  # refused: unchanged
                continue
            raise AssertionError("bad attention accepted")
        p.on_decode_step(pos, attn)
        pos += 1
        if evict_to is None:
            continue
        target = budget if evict_to == "default" else evict_to
        kept = p.kept.tolist()
        scores_before = p.scores.tolist()
        protected = set(kept[len(kept) - window :]) if window else set()
        pinned = set(kept[:sinks])
        if target <= max(window, sinks):
            try:
                p.evict(target)
            except ValueError:
                assert (p.kept.tolist(), p.scores.tolist()) == (kept, scores_before)
                continue
            raise AssertionError(f"evict({target}) accepted with window {window}, sinks {sinks}")
        victims = p.evict(target)
        after = p.kept.tolist()
        assert len(after) <= target
        assert len(victims) == max(0, len(kept) - target)
        assert victims == sorted(victims)
        assert not set(victims) & set(after)
        assert set(victims) | set(after) == set(kept)
        assert not set(victims) & protected  # the window is never evicted
        assert not set(victims) & pinned  # nor the sinks
        assert after == sorted(after)
        # survivors keep their scores
        old = dict(zip(kept, scores_before, strict=True))
        assert p.scores.tolist() == [old[q] for q in after]


@settings(max_examples=100, deadline=None)
@given(
    st.integers(2, 20).flatmap(lambda b: st.tuples(st.just(b), st.integers(0, b - 1))),
    st.lists(st.tuples(st.integers(0, 2**32 - 1), st.booleans()), min_size=1, max_size=60),
)
def test_h2o_equals_the_card_transcription(args, steps):
    budget, window = args
    from h2o import H2O

    p, ref = H2O(budget, window), CardH2O(budget, window)
    for t, (seed, null) in enumerate(steps):
        attn = None if null else weights(np.random.default_rng(seed), len(p), "weights")
        p.on_decode_step(t, attn)
        ref.on_decode_step(t, None if attn is None else attn.tolist())
        assert p.evict() == ref.evict()
        assert p.kept.tolist() == ref.kept
        assert p.scores.tolist() == ref.score
