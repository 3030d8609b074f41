"""Banks against separate instances: kept positions, victims, float64 scores bit for bit, refusals.

Every test builds the same lanes twice — as ``N`` separate policy instances and as one bank —
feeds both the same steps and compares after each one. The instances are the specification.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h2o import H2O, POLICIES, Trace, canonical_trace, replay, stale_spike_trace, toy_trace
from h2o.analysis import make_policy
from h2o.bank import RingBank, ScoredBank, make_bank, replay_bank

SCORED = ["h2o", "scissorhands", "tova", "random"]


class Float32H2O(H2O):
    """A subclass with a rule of its own (the card test's float32 accumulator)."""

    def _accumulate(self, score, attn):
        score[:] = (score.astype(np.float32) + attn).astype(np.float64)


def build(name: str, budget: int, extra: int, seed: int):
    """One lane: ``extra`` is the window (scored) or the sinks (StreamingLLM)."""
    params = {"recent_window": extra, "sinks": extra}
    if name == "random":
        params["rng"] = np.random.default_rng(seed)
    return make_policy(name, budget, **params)


LANE = st.integers(1, 14).flatmap(lambda b: st.tuples(st.just(b), st.integers(0, b - 1)))
BANK = st.one_of(
    st.tuples(st.sampled_from(SCORED), st.lists(LANE, min_size=1, max_size=5)),
    # StreamingLLM and the sliding window share a ring bank
    st.tuples(
        st.lists(st.sampled_from(["streaming-llm", "sliding-window"]), min_size=1, max_size=5),
        st.lists(LANE, min_size=5, max_size=5),
    ),
)
# One budget for every lane: the lanes stay in lock-step, and their rows fill up together.
SAME_BUDGET = st.integers(1, 14).flatmap(
    lambda b: st.tuples(
        st.sampled_from([*SCORED, "streaming-llm"]),
        st.lists(st.integers(0, b - 1).map(lambda e, b=b: (b, e)), min_size=2, max_size=5),
    )
)
STEP = st.tuples(
    st.sampled_from(["block", "block", "block", "rows", "none", "bad", "bad", "pos"]),
    st.integers(0, 2**32 - 1),
    st.one_of(st.none(), st.just("default"), st.just("default"), st.integers(1, 16)),
)


def lanes_of(spec, seed: int = 0):
    kinds, lanes = spec
    if isinstance(kinds, str):
        kinds = [kinds] * len(lanes)
    lanes = lanes[: len(kinds)]  # a ring spec draws more lanes than it has kinds
    return [
        build(k, b, e, seed + i) for i, (k, (b, e)) in enumerate(zip(kinds, lanes, strict=True))
    ]


def weights(rng, n: int) -> np.ndarray:
    w = rng.dirichlet(np.ones(n) * 0.4).astype(np.float32) if n else np.zeros(0, np.float32)
    if n and rng.random() < 0.3:  # exact ties are where tie-breaking shows
        w = np.round(w * 4) / 4
    if n and rng.random() < 0.1:
        w[:] = 0
    return w


def spoil(rng, rows: list[np.ndarray]) -> None:
    """Make one lane's row refusable: NaN, inf, a negative weight, a weight no softmax gives or a
    wrong length — or leave it acceptable (a rounding step above 1), which both must take."""
    i = int(rng.integers(len(rows)))
    kind = int(rng.integers(7))
    if kind == 0 or not rows[i].shape[0]:
        rows[i] = np.ones(rows[i].shape[0] + 1, np.float32)
    else:
        rows[i] = rows[i].copy()
        bad = [np.nan, np.inf, -0.5, 1e30, 1.02, np.float32(1) + np.float32(2**-23)]
        rows[i][rng.integers(rows[i].shape[0])] = bad[kind - 1]


def state(p) -> tuple:
    return p.kept.tolist(), p.scores.tobytes(), p.scores.dtype, p.kept.dtype, len(p), p.last_pos


def same_state(bank, policies) -> None:
    assert bank.fills.tolist() == [len(p) for p in policies]
    for i, p in enumerate(policies):
        assert state(bank.lane(i)) == state(p), f"lane {i}"
        assert bank.kept(i).tolist() == p.kept.tolist()
        assert bank.scores(i).tobytes() == p.scores.tobytes()


def step_both(bank, policies, pos, rows, as_block: bool) -> bool:
    """Step the instances (all or none: a refusal rolls every one back) and the bank alike;
    check that they agree on refusing. Returns whether the step was taken."""
    before = copy.deepcopy(policies)
    refused = None
    try:
        for p, a in zip(policies, rows, strict=True):
            p.on_decode_step(pos, a)
    except ValueError as e:
        refused = e
        policies[:] = before
    snapshot = [state(bank.lane(i)) for i in range(len(bank))]
    attn = np.stack(rows) if as_block else rows
    if refused is None:
        bank.on_decode_step(pos, attn)
        return True
    with pytest.raises(ValueError):
        bank.on_decode_step(pos, attn)
    assert [state(bank.lane(i)) for i in range(len(bank))] == snapshot  # no lane changed
    return False


@settings(max_examples=300, deadline=None)
@given(st.one_of(BANK, SAME_BUDGET), st.lists(STEP, min_size=1, max_size=60))
@pytest.mark.slow
def test_a_bank_is_its_lanes_stepped_separately(spec, steps):
    policies = lanes_of(spec)
    bank = make_bank(lanes_of(spec))  # its own instances: random lanes get equal generators
    assert isinstance(bank, ScoredBank if spec[0] in SCORED else RingBank)
    same_state(bank, policies)
    pos = 0
    for kind, seed, evict_to in steps:
        rng = np.random.default_rng(seed)
        rows = [weights(rng, len(p)) for p in policies]
        cast = rng.random()
        if cast < 0.25:  # float64 weights take the compiled loops too; integers do not
            rows = [r.astype(np.float64) for r in rows]
        elif cast < 0.35 and kind != "bad":  # (a spoiled row needs floats: NaN, inf)
            rows = [(r > 0.3).astype(np.int64) for r in rows]
        if kind == "none":
            rows = [None] * len(policies)
        elif kind == "rows":  # per-lane rows, some lanes told nothing
            rows = [None if rng.random() < 0.3 else r for r in rows]
        elif kind == "bad":
            spoil(rng, rows)
        shapes = {np.shape(r) for r in rows}
        block = kind in ("block", "bad") and len(shapes) == 1 and rng.random() < 0.8
        if kind == "pos":
            with pytest.raises(ValueError, match="pos must"):
                bank.on_decode_step(bank.last_pos - int(rng.integers(2)), None)
        elif step_both(bank, policies, pos, rows, block):
            pos += 1 + int(rng.integers(2))
        same_state(bank, policies)
        if evict_to is None:
            continue
        target = None if evict_to == "default" else evict_to
        try:
            want = [p.evict(target) for p in copy.deepcopy(policies)]
        except ValueError:  # some lane refuses that budget: the bank refuses it, and nobody moves
            with pytest.raises(ValueError):
                bank.evict(target)
            same_state(bank, policies)
            continue
        assert bank.evict(target) == [p.evict(target) for p in policies] == want
        same_state(bank, policies)


#: The methods a bank holds (not K-norm: it runs one instance at a time).
BANKED = [n for n, cls in POLICIES.items() if cls.declares("bank")]


@pytest.mark.parametrize("name", BANKED)
@pytest.mark.parametrize("extras", [(2, 2, 2), (0, 1, 3, 6)], ids=["same", "mixed"])
def test_long_runs_in_lock_step(name, extras):
    # Lock-step throughout (equal budgets): one window for all lanes, and several windows.
    def lanes():
        return [build(name, 8, e, seed=i) for i, e in enumerate(extras)]

    policies, bank = lanes(), make_bank(lanes())
    rng = np.random.default_rng(1)
    for t in range(300):
        rows = [weights(rng, len(p)) for p in policies]
        bank.on_decode_step(t, np.stack(rows) if t % 7 else None)
        for p, a in zip(policies, rows, strict=True):
            p.on_decode_step(t, a if t % 7 else None)
        assert bank.evict() == [p.evict() for p in policies]
        same_state(bank, policies)


def test_lanes_at_different_fill_levels_step_and_evict_exactly():
    specs = [(8, 2), (12, 3), (5, 1)]
    policies = [make_policy("h2o", b, recent_window=w) for b, w in specs]
    bank = make_bank([make_policy("h2o", b, recent_window=w) for b, w in specs])
    rng = np.random.default_rng(0)
    for t in range(40):
        rows = [weights(rng, len(p)) for p in policies]
        bank.on_decode_step(t, rows)
        for p, a in zip(policies, rows, strict=True):
            p.on_decode_step(t, a)
        assert bank.evict() == [p.evict() for p in policies]
        same_state(bank, policies)
    assert sorted(set(bank.fills.tolist())) == [5, 8, 12]


def test_a_block_needs_equal_fills_and_one_row_per_lane():
    bank = make_bank([make_policy("h2o", 8, recent_window=2) for _ in range(3)])
    bank.on_decode_step(0, None)
    with pytest.raises(ValueError, match="2 rows for 3 lanes"):
        bank.on_decode_step(1, np.ones((2, 1), np.float32))
    with pytest.raises(ValueError, match=r"lane 0 \(H2O\(budget=8, recent_window=2\)\): attn has"):
        bank.on_decode_step(1, np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="attn must be None"):
        bank.on_decode_step(1, np.ones(3, np.float32))
    assert bank.last_pos == 0 and bank.fills.tolist() == [1, 1, 1]


@pytest.mark.parametrize("size", [1, 3])
@pytest.mark.parametrize("pos", [True, 1.0, "2", -1, 0, 2**31, np.int8(0)])
def test_positions_are_refused_as_an_instance_refuses_them(size, pos):
    p, bank = make_policy("h2o", 64), make_bank([make_policy("h2o", 64)] * size)
    p.on_decode_step(0, None)
    bank.on_decode_step(0, None)
    with pytest.raises(ValueError) as want:
        p.on_decode_step(pos, None)
    with pytest.raises(ValueError) as got:
        bank.on_decode_step(pos, None)
    assert str(got.value) == str(want.value)
    assert bank.last_pos == 0 and bank.fills.tolist() == [1] * size
    bank.on_decode_step(np.int64(5), None)  # numpy integers are positions
    assert bank.last_pos == 5


def test_banks_refuse_what_their_classes_refuse():
    with pytest.raises(ValueError, match="policies of one class"):
        make_bank([make_policy("h2o", 64), make_policy("tova", 64)])
    with pytest.raises(ValueError, match="policies of one class"):
        ScoredBank([make_policy("h2o", 64), Float32H2O(64)])
    with pytest.raises(ValueError, match="no bank holds"):
        make_bank([object()])
    # a subclass may change anything: banks run only the library's own classes
    with pytest.raises(ValueError, match="no bank holds Float32H2O"):
        make_bank([Float32H2O(64)])
    with pytest.raises(ValueError, match="fresh"):
        p = make_policy("h2o", 64)
        p.on_decode_step(0, None)
        make_bank([p])
    with pytest.raises(ValueError, match="at least one"):
        make_bank([])
    bank = make_bank([make_policy("streaming-llm", 8, sinks=s) for s in (0, 4)])
    with pytest.raises(ValueError, match=r"lane 1 .*sinks \(4\) must be smaller than budget \(4\)"):
        bank.evict(4)


def test_the_lanes_are_policies_with_their_parameters_and_rng():
    rngs = [np.random.default_rng(s) for s in (1, 2)]
    bank = make_bank([make_policy("random", 16, recent_window=4, rng=r) for r in rngs])
    assert [type(bank.lane(i)).__name__ for i in range(2)] == ["RandomEviction"] * 2
    assert bank.lane(1).rng is rngs[1] and bank.params()[0] == {"budget": 16, "recent_window": 4}
    ring = make_bank([POLICIES["sliding-window"](6), POLICIES["streaming-llm"](6, sinks=2)])
    assert [lane.name for lane in ring] == ["sliding-window", "streaming-llm"]
    assert repr(ring.lane(0)) == "SlidingWindow(budget=6)"


# -- replays -----------------------------------------------------------------------------------
def same_replay(a, b) -> None:
    for f in ("mass", "recall", "oracle", "n_kept", "victim_step", "victim_pos"):
        x, y = getattr(a, f), getattr(b, f)
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f
    assert np.isnan(a.victim_score).all() and a.victim_score.shape == b.victim_score.shape
    assert (a.policy, a.label, a.params, a.budget, a.window, a.sinks, a.top_k) == (
        b.policy,
        b.label,
        b.params,
        b.budget,
        b.window,
        b.sinks,
        b.top_k,
    )
    np.testing.assert_equal(a.summary(), b.summary())  # nan where the trace fits the budget


TRACE = st.integers(2, 60).flatmap(
    lambda steps: st.tuples(st.just(steps), st.integers(0, 2**32 - 1), st.booleans())
)


@settings(max_examples=100, deadline=None)
@given(st.one_of(BANK, SAME_BUDGET), TRACE, st.integers(1, 8))
def test_a_bank_replay_is_each_lanes_replay(spec, trace_args, top_k):
    steps, seed, sparse = trace_args
    rng = np.random.default_rng(seed)
    dense = rng.random((steps, steps)) ** (8 if sparse else 1)
    dense[rng.random((steps, steps)) < 0.05] = 0
    dense[np.arange(1, steps), 0] += 1e-3  # no all-zero row
    trace = Trace.from_dense("random", dense, normalize=True)
    got = replay_bank(make_bank(lanes_of(spec, seed)), trace, top_k)
    for a, p in zip(got, lanes_of(spec, seed), strict=True):
        same_replay(a, replay(p, trace, top_k, record=False))


@pytest.mark.parametrize("trace", [toy_trace(), stale_spike_trace()], ids=["toy", "stale"])
def test_bank_replays_of_the_lesson_traces(trace):
    for name in BANKED:
        for budget in (6, 8, 12):
            lanes = [make_policy(name, budget, recent_window=w, sinks=w) for w in range(budget)]
            got = replay_bank(make_bank(lanes), trace, 4)
            for a, w in zip(got, range(budget), strict=True):
                want = replay(
                    make_policy(name, budget, recent_window=w, sinks=w), trace, 4, record=False
                )
                same_replay(a, want)


def test_a_window_sweep_on_the_canonical_trace_is_each_replay():
    trace = canonical_trace(steps=1200)
    lanes = [make_policy("h2o", 256, recent_window=w) for w in range(0, 193, 24)]
    seen: list[tuple[int, int]] = []
    got = replay_bank(make_bank(lanes), trace, 32, progress=lambda d, n, _w: seen.append((d, n)))
    want = [make_policy("h2o", 256, recent_window=w) for w in range(0, 193, 24)]
    for a, p in zip(got, want, strict=True):
        same_replay(a, replay(p, trace, 32, record=False))
    assert seen[0] == (0, 1200) and seen[-1] == (1200, 1200)


def test_replay_bank_needs_a_fresh_bank_and_a_good_top_k():
    bank = make_bank([make_policy("h2o", 8, recent_window=2) for _ in range(2)])
    with pytest.raises(ValueError, match="top_k"):
        replay_bank(bank, toy_trace(), 0)
    bank.on_decode_step(0, None)
    with pytest.raises(ValueError, match="fresh bank"):
        replay_bank(bank, toy_trace())


# -- the steady state: the compiled loop ---------------------------------------------------------
QUANTIZED = st.tuples(
    st.integers(8, 70), st.integers(0, 2**32 - 1), st.sampled_from([4, 16, 2**20])
)


@settings(max_examples=80, deadline=None)
@given(st.one_of(BANK, SAME_BUDGET), QUANTIZED, st.integers(1, 8))
def test_the_steady_state_is_each_lanes_replay_ties_and_final_state_included(
    spec, trace_args, top_k
):
    """Weights on a coarse grid (multiples of 1/q, exact zeros) make ties in the scores common;
    the steady path must settle them by position, and leave every lane as its instance."""
    from h2o.bank.replay import _exact_sums

    steps, seed, q = trace_args
    rng = np.random.default_rng(seed)
    dense = np.floor(rng.random((steps, steps)) * q) + (rng.random((steps, steps)) < 0.7)
    dense[np.arange(1, steps), 0] += 1
    dense = np.tril(dense, -1)
    dense[1:] /= dense[1:].sum(axis=1, keepdims=True)
    trace = Trace.from_dense("grid", dense.astype(np.float32), normalize=True)
    assert _exact_sums(trace)
    bank = make_bank(lanes_of(spec, seed))
    got = replay_bank(bank, trace, top_k)
    for i, (a, p) in enumerate(zip(got, lanes_of(spec, seed), strict=True)):
        same_replay(a, replay(p, trace, top_k, record=False))
        assert state(bank.lane(i)) == state(p), f"lane {i}"


def test_traces_with_tiny_weights_keep_the_per_step_path():
    from h2o.bank.replay import _exact_sums

    rng = np.random.default_rng(5)
    dense = rng.random((40, 40)) ** 40  # weights far below 2**-29
    dense[np.arange(1, 40), 0] += 1e-3
    trace = Trace.from_dense("tiny", dense, normalize=True)
    assert not _exact_sums(trace)
    lanes = [make_policy("h2o", 8, recent_window=w) for w in range(8)]
    assert make_bank(lanes)._steady_from(trace) == -1
    assert make_bank(lanes)._steady_from(canonical_trace(steps=300)) == 8
    got = replay_bank(make_bank(lanes), trace, 4)
    for a, w in zip(got, range(8), strict=True):
        same_replay(a, replay(make_policy("h2o", 8, recent_window=w), trace, 4, record=False))


def test_warm_compiles_every_signature_the_library_passes():
    """``kernels.warm()`` (the app runs it when it starts) leaves nothing to compile for the
    paths a class uses: steady and per-step replays, public steps with float32 and float64
    blocks or none, and the model's per-token step and gather."""
    from h2o import TOVA, Scissorhands
    from h2o.bank import kernels
    from h2o.model import closed_loop

    names = ["replay_steady", "advance_lanes", "evict_lanes", "step_lanes", "gather_kept"]
    kernels.warm()
    before = {n: set(map(str, getattr(kernels, n).signatures)) for n in names}
    trace = canonical_trace(steps=300)
    for cls in (H2O, Scissorhands, TOVA):
        replay_bank(make_bank([cls(64, 1), cls(64, 8)]), trace)  # one budget: the steady loop
        replay_bank(make_bank([cls(40, 1), cls(64, 8)]), trace)  # two: step by step
    bank = make_bank([H2O(8, 1), H2O(8, 2), H2O(8, 3)])
    rng = np.random.default_rng(0)
    for t in range(20):
        n = bank.fills[0]
        attn = None if t % 5 == 0 else rng.dirichlet(np.ones(n), size=3) if n else None
        if attn is not None and t % 2:
            attn = attn.astype(np.float32)
        bank.on_decode_step(t, attn)
        bank.evict()
    G, gs, c, kv = 3, 3, 4, 24
    p = rng.dirichlet(np.ones(kv), size=(G, gs, c)).astype(np.float32)
    mask = np.zeros((G, c, kv), dtype=bool)
    for i in range(c):
        closed_loop._step_bank(p, 20 + i, i, bank, mask)
    assert {n: set(map(str, getattr(kernels, n).signatures)) for n in names} == before
