"""The shared contract of every policy, the baselines' own rules, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from h2o import H2O, POLICIES, TOVA, RandomEviction, Scissorhands, SlidingWindow, StreamingLLM
from h2o.policies.registry import BUILT_IN, build
from h2o.reference import CARD_POLICIES
from h2o.trace_vectors import HeadVectors

#: Every policy that evicts (Quest holds every position: tests/test_quest_policy.py).
ALL = [n for n, cls in POLICIES.items() if not cls.selects]
#: K-norm's key norms: one a position for every position these tests admit.
NORMS = np.random.default_rng(0).gamma(2, 3, 5000)
#: Expected Attention's queries, keys and value norms, as many positions.
VECTORS = HeadVectors(
    *(np.random.default_rng(1).normal(size=s) for s in ((5000, 2, 8), (5000, 1, 8))),
    np.random.default_rng(2).gamma(2, 1, (5000, 1)),
    10000.0,
)


#: What the methods that read more than attention are handed (``reads_trace``), by name.
SIGNALS = {"key_norms": NORMS, "vectors": VECTORS, "kvzip_scores": NORMS / NORMS.max()}


def make(name, budget=8, **kw):
    """``POLICIES[name]`` at small settings, each taken if its class has it: a window of 2 (TOVA's
    own, 1), 2 sinks, a seeded rng and the trace's signals it reads."""
    cls = POLICIES[name]
    window = getattr(cls, "default_recent_window", 2) if cls.own_window else 2
    signals = {k: SIGNALS[k] for k in cls.reads_trace}
    settings = {"recent_window": window, "sinks": 2, "rng": np.random.default_rng(0), **signals}
    return build(cls, budget, **{**settings, **kw})


def drive(p, steps, seed=0, start=0):
    rng = np.random.default_rng(seed)
    out = []
    for t in range(start, start + steps):
        w = rng.dirichlet(np.ones(len(p))).astype(np.float32) if len(p) else np.zeros(0, np.float32)
        p.on_decode_step(t, w)
        out.append(p.evict())
    return out


def snapshot(p):
    return (list(p.kept), list(p.scores), len(p))


def test_registry_names():
    """Every class of ``BUILT_IN`` by its own name (none listed here), the card's among them."""
    assert {c.name: c for c in BUILT_IN} == POLICIES and len(POLICIES) == len(BUILT_IN)
    assert {"h2o", "streaming-llm", "scissorhands", "tova", "sliding-window", "random"} <= set(
        POLICIES
    )
    assert POLICIES["h2o"] is H2O and POLICIES["streaming-llm"] is StreamingLLM


@pytest.mark.parametrize("name", ALL)
def test_contract_budget_respected_victims_ascending_and_gone(name):
    p = make(name, budget=8)
    rng = np.random.default_rng(1)
    for t in range(200):
        w = rng.dirichlet(np.ones(len(p))).astype(np.float32) if len(p) else np.zeros(0)
        before = set(p.kept.tolist()) | {t}
        p.on_decode_step(t, w)
        # admitted with score 0 (the card's rule), or K-norm's score known on arrival: -‖k‖
        # (Expected Attention rescores every kept key every window of 2 steps, the newest too)
        admitted = {"key-norm": -NORMS[t], "kvzip": NORMS[t] / NORMS.max()}.get(name, 0.0)
        assert p.kept[-1] == t
        assert p.scores[-1] == admitted or name == "expected-attention"
        victims = p.evict()
        assert len(p) == min(t + 1, 8)
        assert victims == sorted(victims)
        assert set(victims) <= before and not set(victims) & set(p.kept.tolist())
        assert np.all(np.diff(p.kept) > 0)  # arrival order is ascending
        assert p.scores.dtype == np.float64 and p.scores.shape == p.kept.shape


@pytest.mark.parametrize("name", ALL)
def test_kept_and_scores_are_read_only(name):
    p = make(name)
    drive(p, 5)
    with pytest.raises(ValueError):
        p.kept[0] = 99
    with pytest.raises(ValueError):
        p.scores[0] = 1.0


@pytest.mark.parametrize("name", sorted(CARD_POLICIES))
def test_matches_the_pure_python_transcription(name):
    """Step by step, with null steps, skipped evictions (the cache grows past budget + 1, the
    ring buffer wraps and grows) and evictions to other budgets."""
    rng = np.random.default_rng(5)
    p = make(name, budget=12)
    ref = CARD_POLICIES[name](12, **{k: v for k, v in p.params().items() if k != "budget"})
    floor = max(getattr(p, "recent_window", 0), getattr(p, "sinks", 0)) + 1
    for t in range(600):
        w = rng.dirichlet(np.ones(len(p)) * 0.5).astype(np.float32) if len(p) else []
        w = None if rng.random() < 0.1 else np.asarray(w, dtype=np.float32)
        p.on_decode_step(t, w)
        ref.on_decode_step(t, None if w is None else [float(x) for x in w])
        r = rng.random()
        if r < 0.2:
            continue  # no eviction this step
        budget = int(rng.integers(floor, 16)) if r < 0.35 else None
        assert p.evict(budget) == ref.evict(budget)
        assert list(p.kept) == ref.kept
        if hasattr(ref, "score"):
            assert list(p.scores) == ref.score


def test_streaming_llm_defaults_to_four_sinks():
    """The card: "StreamingLLM is a ring buffer with four pinned slots."."""
    assert StreamingLLM(64).sinks == 4


# -- bad input: a clear ValueError, and nothing changes ------------------------------------------
BAD_ATTN = {
    "wrong length": (lambda n: np.ones(n + 1, np.float32) / (n + 1), "length"),
    "NaN": (lambda n: np.r_[np.full(n - 1, 1 / n), np.nan].astype(np.float32), "NaN"),
    "inf": (lambda n: np.r_[np.zeros(n - 1), np.inf].astype(np.float32), "inf"),
    "negative": (lambda n: np.r_[np.full(n - 1, 0.5), -0.1].astype(np.float32), "negative"),
    "2-D": (lambda n: np.ones((1, n), np.float32) / n, "1-D"),
    # Finite but no softmax output: two such steps would overflow H2O's sums to inf.
    "huge": (lambda n: np.full(n, 1e308), "at most 1"),
    "raw scores": (lambda n: np.linspace(0, 3, n).astype(np.float32), "at most 1"),
    "strings": (lambda n: np.array(["a"] * n), "1-D"),
}


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("bad", list(BAD_ATTN))
def test_bad_attention_is_refused_and_changes_nothing(name, bad):
    p, twin = make(name), make(name)
    drive(p, 12)
    drive(twin, 12)
    make_attn, match = BAD_ATTN[bad]
    before = snapshot(p)
    with pytest.raises(ValueError, match=match):
        p.on_decode_step(12, make_attn(len(p)))
    assert snapshot(p) == before
    # ... and the policy carries on exactly as its twin that never saw the bad call
    assert drive(p, 30, seed=9, start=12) == drive(twin, 30, seed=9, start=12)
    assert snapshot(p) == snapshot(twin)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(
    ("pos", "match"),
    [(5, "increase"), (4, "increase"), (2.5, "integer"), (True, "integer"), (2**31, "int32")],
)
def test_bad_positions_are_refused_and_change_nothing(name, pos, match):
    p = make(name)
    drive(p, 6)  # last position 5
    before = snapshot(p)
    with pytest.raises(ValueError, match=match):
        p.on_decode_step(pos, None)
    assert snapshot(p) == before


@pytest.mark.parametrize("name", ALL)
def test_negative_first_position_is_refused(name):
    with pytest.raises(ValueError, match=">= 0"):
        make(name).on_decode_step(-1, None)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("budget", [0, -3, 2.0, "8", None])
def test_bad_budgets_are_refused(name, budget):
    with pytest.raises(ValueError, match="budget"):
        POLICIES[name](budget)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("budget", [2**24 + 1, 2**31, 10**12, 10**30, np.int64(2**40)])
def test_huge_budgets_are_refused_naming_the_limit(name, budget):
    # Before: MemoryError, "maximum allowed dimension exceeded", or 2**31 accepted past the
    # int32 position store.
    with pytest.raises(ValueError, match=r"budget must be <= 16777216"):
        POLICIES[name](budget)
    p = make(name)
    drive(p, 10)
    before = snapshot(p)
    with pytest.raises(ValueError, match=r"budget must be <= 16777216"):
        p.evict(budget)
    assert snapshot(p) == before


def test_the_largest_budget_is_accepted():
    assert StreamingLLM(2**24).budget == 2**24


@pytest.mark.parametrize("name", ALL)
def test_weights_that_would_overflow_the_scores_are_refused(name):
    """Two steps of [1e308] * n made H2O's scores inf with only a RuntimeWarning."""
    p = make(name)
    drive(p, 10)
    before = snapshot(p)
    for pos in (10, 11):
        with pytest.raises(ValueError, match="softmax"):
            p.on_decode_step(pos, np.full(len(p), 1e308))
    assert snapshot(p) == before and np.isfinite(p.scores).all()


@pytest.mark.parametrize("name", ALL)
def test_weights_at_one_and_rounding_above_it_are_accepted(name):
    p = make(name)
    drive(p, 10)
    p.on_decode_step(10, np.r_[np.zeros(len(p) - 1), np.float32(1.0078125)])  # bf16 above 1
    assert p.kept[-1] == 10


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("budget", [0, -1, 1.5])
def test_bad_evict_budgets_are_refused_and_change_nothing(name, budget):
    p = make(name)
    drive(p, 10)
    before = snapshot(p)
    with pytest.raises(ValueError, match="budget"):
        p.evict(budget)
    assert snapshot(p) == before


@pytest.mark.parametrize("cls", [H2O, Scissorhands, TOVA, RandomEviction])
def test_negative_windows_are_refused(cls):
    with pytest.raises(ValueError, match="recent_window"):
        cls(8, recent_window=-1)


@pytest.mark.parametrize("sinks", [-1, 8, 9])
def test_bad_sinks_are_refused(sinks):
    with pytest.raises(ValueError, match="sinks"):
        StreamingLLM(8, sinks=sinks)


def test_rng_must_be_a_generator():
    with pytest.raises(ValueError, match="rng"):
        H2O(8, 2, rng=np.random.RandomState(0))


@pytest.mark.parametrize("name", ALL)
def test_null_attention_is_accepted_and_admits(name):
    p = make(name)
    drive(p, 10)
    before = list(p.scores)
    p.on_decode_step(10, None)
    assert p.kept[-1] == 10
    if name == "expected-attention":
        # Reads no attention (every step is None to it): step 10 rescores every key (its window
        # of 2 is its interval, 10 % 2 == 0)
        assert list(p.scores[:-1]) != before
    else:
        assert list(p.scores[:-1]) == before


@pytest.mark.parametrize("name", ALL)
def test_admitting_past_budget_without_evicting_then_evicting_many(name):
    p = make(name, budget=8)
    for t in range(30):
        p.on_decode_step(t, None if t % 3 else np.ones(len(p), np.float32) / max(len(p), 1))
    assert len(p) == 30
    victims = p.evict()
    assert len(victims) == 22 and victims == sorted(victims)
    assert len(p) == 8


# -- Scissorhands -----------------------------------------------------------------------------
def test_scissorhands_votes_only_strictly_above_the_fair_share():
    p = Scissorhands(8, recent_window=1)
    for t in range(4):
        p.on_decode_step(t, None)
    p.on_decode_step(4, np.array([0.25, 0.5, 0.25, 0.0], np.float32))  # fair share 1/4
    assert list(p.scores) == [0.0, 1.0, 0.0, 0.0, 0.0]
    # fair share 1/5; weights exact in float32
    p.on_decode_step(5, np.array([0.25, 0.125, 0.1875, 0.1875, 0.25], np.float32))
    assert list(p.scores) == [1.0, 1.0, 0.0, 0.0, 1.0, 0.0]


def test_scissorhands_compares_float32_weights_with_the_fair_share_exactly():
    # float32(1/3) is slightly above 1/3: it beats the fair share (a float32 comparison would
    # round 1/3 to the same float32 and call it a tie).
    p = Scissorhands(8, recent_window=1)
    for t in range(3):
        p.on_decode_step(t, None)
    p.on_decode_step(3, np.full(3, 1 / 3, dtype=np.float32))
    assert list(p.scores[:3]) == [1.0, 1.0, 1.0]


def test_scissorhands_single_position_at_weight_one_gets_no_vote():
    p = Scissorhands(8, recent_window=1)
    p.on_decode_step(0, None)
    p.on_decode_step(1, np.ones(1, np.float32))  # 1 == 1/1: not greater
    assert p.scores[0] == 0.0


def test_scissorhands_ties_evict_the_lower_position():
    p = Scissorhands(3, recent_window=1)
    for t in range(3):
        p.on_decode_step(t, None)
    p.on_decode_step(3, np.full(3, 1 / 3, np.float32))  # everyone votes once
    assert p.evict() == [0]


# -- TOVA ---------------------------------------------------------------------------------------
def test_tova_scores_are_the_latest_weights_not_a_sum():
    p = TOVA(8)
    for t in range(3):
        p.on_decode_step(t, None)
    p.on_decode_step(3, np.array([0.5, 0.3, 0.2], np.float32))
    p.on_decode_step(4, np.array([0.1, 0.2, 0.3, 0.4], np.float32))
    assert list(p.scores) == [float(np.float32(x)) for x in (0.1, 0.2, 0.3, 0.4)] + [0.0]


def test_tova_evicts_the_least_attended_this_step_and_protects_the_newest():
    p = TOVA(3)
    for t in range(3):
        p.on_decode_step(t, None)
    p.on_decode_step(3, np.array([0.5, 0.1, 0.4], np.float32))
    assert p.evict() == [1]
    assert list(p.kept) == [0, 2, 3]


# -- StreamingLLM and the sliding window --------------------------------------------------------
def test_streaming_llm_pins_the_sinks_and_keeps_the_most_recent():
    p = StreamingLLM(6, sinks=2)
    for t in range(50):
        p.on_decode_step(t, None)
        p.evict()
    assert list(p.kept) == [0, 1, 46, 47, 48, 49]


def test_streaming_llm_evicts_the_oldest_outside_the_sinks():
    p = StreamingLLM(4, sinks=1)
    for t in range(4):
        p.on_decode_step(t, None)
    p.on_decode_step(4, None)
    assert p.evict() == [1]
    p.on_decode_step(5, None)
    p.on_decode_step(6, None)
    assert p.evict() == [2, 3]


def test_sliding_window_is_streaming_llm_without_sinks():
    p = SlidingWindow(5)
    for t in range(20):
        p.on_decode_step(t, None)
        p.evict()
    assert list(p.kept) == [15, 16, 17, 18, 19]
    assert p.params() == {"budget": 5}


def test_streaming_llm_does_not_read_attention():
    p, q = StreamingLLM(6, sinks=2), StreamingLLM(6, sinks=2)
    rng = np.random.default_rng(0)
    for t in range(40):
        p.on_decode_step(t, rng.dirichlet(np.ones(len(p))).astype(np.float32) if t else None)
        q.on_decode_step(t, None)
        assert p.evict() == q.evict()
    assert not p.reads_attention and not np.any(p.scores)


# -- Random -------------------------------------------------------------------------------------
def test_random_eviction_uses_its_rng_and_respects_the_window():
    a = RandomEviction(8, recent_window=3, rng=np.random.default_rng(1))
    b = RandomEviction(8, recent_window=3, rng=np.random.default_rng(1))
    c = RandomEviction(8, recent_window=3, rng=np.random.default_rng(2))
    va, vb, vc = drive(a, 100), drive(b, 100), drive(c, 100)
    assert va == vb  # same seed, same victims
    assert va != vc  # another seed, other victims
    for t, v in enumerate(va):
        assert all(x < t - 2 for x in v)  # never one of the 3 most recent


def test_random_eviction_without_rng_is_reproducible():
    assert drive(RandomEviction(8, 2), 60) == drive(RandomEviction(8, 2), 60)
