"""A bank's own surface, beyond stepping: indexing and iteration (its lanes), its repr (its
lanes'), the model's trusted step refusing a non-finite weight (False, nothing moved), and the
progress a one-lane replay reports (the same calls as a bank of many)."""

from __future__ import annotations

import numpy as np
import pytest

from h2o import canonical_trace, replay
from h2o.analysis import make_policy
from h2o.bank import make_bank, replay_bank


def lanes(name: str, budget: int, extras) -> list:
    return [make_policy(name, budget, recent_window=e, sinks=e) for e in extras]


def snapshot(bank) -> list:
    return [(p.kept.tolist(), p.scores.tobytes(), p.last_pos) for p in bank]


def test_a_bank_is_the_sequence_of_its_lanes():
    bank = make_bank(lanes("h2o", 8, (1, 2, 3)))
    assert len(bank) == 3
    for i in range(3):
        assert bank[i] is bank.lane(i)
        assert bank[i].params() == {"budget": 8, "recent_window": i + 1}
    assert [p.recent_window for p in bank] == [1, 2, 3]
    assert repr(bank) == (
        "ScoredBank(H2O(budget=8, recent_window=1), H2O(budget=8, recent_window=2), "
        "H2O(budget=8, recent_window=3))"
    )
    ring = make_bank([make_policy("sliding-window", 6), make_policy("streaming-llm", 6, sinks=2)])
    assert repr(ring) == "RingBank(SlidingWindow(budget=6), StreamingLLM(budget=6, sinks=2))"


@pytest.mark.parametrize(("name", "fill"), [("h2o", 3), ("h2o", 8), ("tova", 5)])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_the_trusted_step_refuses_a_weight_that_is_not_finite(name, fill, bad):
    """``step_trusted`` before the cache is full (the per-step path) and in the steady state
    (the compiled one): False, and no lane moved."""
    bank = make_bank(lanes(name, 8, (1, 2)))
    rng = np.random.default_rng(0)
    for t in range(fill):
        n = int(bank.fills[0])
        attn = rng.dirichlet(np.ones(n), size=2).astype(np.float32) if n else None
        assert bank.step_trusted(t, attn) is True
    before = snapshot(bank)
    attn = rng.dirichlet(np.ones(fill), size=2).astype(np.float32)
    attn[1, 0] = bad
    assert bank.step_trusted(fill, attn) is False
    assert snapshot(bank) == before and bank.last_pos == fill - 1
    attn[1, 0] = 0
    assert bank.step_trusted(fill, attn) is True
    assert bank.last_pos == fill and bank.fills.tolist() == [min(fill + 1, 8)] * 2


@pytest.mark.parametrize("extras", [(2,), (2, 4)], ids=["one lane", "two lanes"])
def test_replay_bank_reports_its_progress_and_leaves_the_lanes_as_their_steps(extras):
    trace = canonical_trace(steps=300)
    seen: list[tuple] = []
    bank = make_bank(lanes("h2o", 32, extras))
    got = replay_bank(bank, trace, 8, progress=lambda *a: seen.append(a))
    assert seen[0] == (0, 300, "steps") and seen[-1] == (300, 300, "steps")
    done = [d for d, _, _ in seen]
    assert done == sorted(done) and {(n, what) for _, n, what in seen} == {(300, "steps")}
    assert bank.last_pos == 299 and bank.fills.tolist() == [32] * len(extras)
    for i, (r, e) in enumerate(zip(got, extras, strict=True)):
        p = make_policy("h2o", 32, recent_window=e)
        want = replay(p, trace, 8, record=False)
        assert r.victim_pos.tobytes() == want.victim_pos.tobytes()
        assert r.mass.tobytes() == want.mass.tobytes()
        # the bank is left as its lanes' steps leave them, and steps on from there alike
        assert bank[i].kept.tolist() == p.kept.tolist() and bank[i].last_pos == p.last_pos
    bank.on_decode_step(300, None)
    assert bank.last_pos == 300 and bank.fills.tolist() == [33] * len(extras)


@pytest.mark.parametrize(
    ("attn", "what"),
    [
        (np.ones(3, np.float32), "<class 'numpy.ndarray'> of shape (3,)"),
        (np.ones((3, 1, 1), np.float32), "<class 'numpy.ndarray'> of shape (3, 1, 1)"),
        ("abc", "<class 'str'> of shape ()"),
        (7, "<class 'int'> of shape ()"),
    ],
)
def test_attention_of_no_per_lane_form_is_refused_by_its_type_and_shape(attn, what):
    bank = make_bank(lanes("h2o", 8, (1, 2, 3)))
    bank.on_decode_step(0, None)
    before = snapshot(bank)
    with pytest.raises(ValueError) as e:
        bank.on_decode_step(1, attn)
    assert str(e.value) == f"attn must be None, an (N, n) array or one row per lane, got {what}"
    assert snapshot(bank) == before and bank.last_pos == 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int64])
@pytest.mark.parametrize("name", ["h2o", "tova", "random"])
@pytest.mark.parametrize("trusted", [False, True], ids=["public", "trusted"])
def test_blocks_of_any_weight_dtype_step_as_the_instances(dtype, name, trusted):
    """Float32 and float64 blocks take the compiled loops, others (and random eviction) each
    lane's own code; ``None`` is no information. Either way: the instances, bit for bit,
    through the public step and eviction and through the model's trusted step."""

    def make():
        return [
            make_policy(name, 6, recent_window=w, rng=np.random.default_rng(w)) for w in (1, 2, 4)
        ]

    policies, bank = make(), make_bank(make())
    rng = np.random.default_rng(7)
    for t in range(40):
        n = len(policies[0])
        block = rng.dirichlet(np.ones(n), size=3) if n else np.zeros((3, 0))
        if dtype is np.int64:
            block = block > 1 / max(n, 1)  # 0/1 weights
        block = None if t % 5 == 3 else block.astype(dtype)
        for i, p in enumerate(policies):
            p.on_decode_step(t, None if block is None else block[i])
            p.evict()
        if trusted:
            assert bank.step_trusted(t, block) is True
        else:
            bank.on_decode_step(t, block)
            bank.evict()
        for i, p in enumerate(policies):
            assert bank[i].kept.tolist() == p.kept.tolist(), (t, i)
            assert bank[i].scores.tobytes() == p.scores.tobytes(), (t, i)


@pytest.mark.parametrize(
    ("name", "budgets", "stepwise"),
    [
        ("h2o", (32, 32), False),  # the caches fill in lock-step, then the steady runs
        ("h2o", (600, 600), False),
        ("h2o", (32, 40), True),  # budgets differ: every step on its own
        ("random", (32, 32), True),  # random eviction: every step on its own
    ],
)
def test_progress_of_a_long_replay_counts_every_report(name, budgets, stepwise):
    """Each report is ``(steps done, steps, "steps")``, the count an integer that never goes
    back, from 0 to done; one every ``PROGRESS_EVERY`` steps while steps are taken one at a time
    (the caches filling, or every step when the lanes cannot run in lock-step); past the first
    eviction of a steady bank, runs of ``PROGRESS_EVERY`` steps with reports between them."""
    from h2o.bank.replay import PROGRESS_EVERY

    steps = 2 * PROGRESS_EVERY + 300
    trace = canonical_trace(steps=steps)
    seen: list[tuple] = []
    bank = make_bank([make_policy(name, b, recent_window=2) for b in budgets])
    replay_bank(bank, trace, 8, progress=lambda *a: seen.append(a))
    done = [d for d, _, _ in seen]
    assert all(type(d) is int for d in done) and done == sorted(done)
    assert {(n, what) for _, n, what in seen} == {(steps, "steps")}
    assert done[0] == 0 and done[-1] == steps and len(done) >= 3  # reports inside the runs too
    if stepwise:
        assert done == [*range(0, steps, PROGRESS_EVERY), steps]
    else:
        assert [d for d in done if d < budgets[0]] == list(range(0, budgets[0], PROGRESS_EVERY))


@pytest.mark.parametrize("name", ["h2o", "random", "streaming-llm"])
@pytest.mark.parametrize("dtype", [np.bool_, np.complex64, object])
def test_a_block_of_no_weight_dtype_is_refused_as_each_lane_refuses_it(name, dtype):
    bank = make_bank(lanes(name, 8, (1, 2)))
    one = make_policy(name, 8, recent_window=1, sinks=1)
    for t in range(3):
        bank.on_decode_step(t, None)
        one.on_decode_step(t, None)
    before = snapshot(bank)
    block = np.ones((2, 3), dtype=dtype)
    with pytest.raises(ValueError) as want:
        one.on_decode_step(3, block[0])
    with pytest.raises(ValueError) as got:
        bank.on_decode_step(3, block)
    assert str(got.value) == f"lane 0 ({bank[0]!r}): {want.value}"
    assert snapshot(bank) == before and bank.last_pos == 2


@pytest.mark.parametrize("name", ["h2o", "random", "streaming-llm", "sliding-window"])
@pytest.mark.parametrize("budgets", [(6, 6, 6), (6, 9, 6)], ids=["lock-step", "per lane"])
def test_victims_are_positions_as_python_ints(name, budgets):
    """``evict`` returns what each lane's own ``evict`` returns: lists of ints, ascending."""

    def make():
        return [make_policy(name, b, recent_window=1, sinks=1) for b in budgets]

    policies, bank = make(), make_bank(make())
    for t in range(20):
        bank.on_decode_step(t, None)
        for p in policies:
            p.on_decode_step(t, None)
        target = 4 if t == 15 else None  # several victims at once, once
        got, want = bank.evict(target), [p.evict(target) for p in policies]
        assert got == want
        assert all(type(v) is int for vs in got for v in vs)
    assert sum(len(vs) for vs in want) > 1


def test_replay_bank_shares_replays_default_and_refuses_a_used_bank_by_name():
    trace = canonical_trace(steps=300)
    default = replay(make_policy("h2o", 32, recent_window=2), trace).top_k
    assert default == 32
    for extras in ((2,), (2, 4)):
        bank = make_bank(lanes("h2o", 32, extras))
        assert [r.top_k for r in replay_bank(bank, trace)] == [default] * len(extras)
        # the method replay_bank calls, with its own default
        again = make_bank(lanes("h2o", 32, extras)).replay(trace)
        assert [r.top_k for r in again] == [default] * len(extras)
        with pytest.raises(ValueError) as e:
            replay_bank(bank, trace)
        assert str(e.value) == "replay_bank needs a fresh bank (this one has already taken steps)"


def test_a_ring_bank_refuses_other_policies_by_name():
    from h2o.bank import RingBank

    for other in (
        make_policy("h2o", 8, recent_window=2),
        make_policy("random", 8, recent_window=2),
    ):
        with pytest.raises(ValueError) as e:
            RingBank([make_policy("streaming-llm", 8, sinks=2), other])
        assert str(e.value) == "a ring bank holds StreamingLLM and sliding-window policies"


def _step_all(bank, steps: range, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for t in steps:
        n = int(bank.fills[0])
        attn = rng.dirichlet(np.ones(n), size=bank.size).astype(np.float32) if n else None
        assert bank.step_trusted(t, attn) is True


@pytest.mark.parametrize("name", ["h2o", "tova", "streaming-llm", "sliding-window"])
def test_a_deep_copy_steps_on_as_its_original_and_leaves_it_alone(name):
    """The model copies a bank after a prompt (to decode from there again): the copy's lanes
    must read the copy's storage (numpy copies each array on its own, which would leave a
    lane's row a copy of its own: ``kept`` stale while the bank moved on)."""
    import copy

    bank = make_bank(lanes(name, 8, (2, 3)) if name in ("h2o", "tova") else lanes(name, 8, (2,)))
    _step_all(bank, range(20), seed=1)
    before = snapshot(bank)
    twin = copy.deepcopy(bank)
    _step_all(twin, range(20, 45), seed=2)
    assert snapshot(bank) == before  # the original did not move
    _step_all(bank, range(20, 45), seed=2)
    assert snapshot(twin) == snapshot(bank)
    assert [p.kept.max() for p in twin] == [44] * twin.size  # the lanes did follow the steps


def test_a_deep_copy_of_an_adaptive_layer_steps_on_as_its_original():
    import copy

    from h2o.bank.adaptive import AdaptiveLayer
    from h2o.policies import H2O

    def feed(layer, steps, seed):
        rng = np.random.default_rng(seed)
        for t in steps:
            for h in layer.heads:
                n = len(h.kept)
                h.on_decode_step(t, rng.dirichlet(np.ones(n)).astype(np.float32) if n else None)
                h.evict()

    layer = AdaptiveLayer([H2O(3 * 6, recent_window=2) for _ in range(3)], 6, alpha=0.2)
    feed(layer, range(30), seed=3)
    twin = copy.deepcopy(layer)
    state = [h.kept.tolist() for h in layer.heads]
    feed(twin, range(30, 50), seed=4)
    assert [h.kept.tolist() for h in layer.heads] == state
    feed(layer, range(30, 50), seed=4)
    assert [h.kept.tolist() for h in twin.heads] == [h.kept.tolist() for h in layer.heads]
    assert max(max(h.kept) for h in twin.heads) == 49


@pytest.mark.parametrize("name", ["h2o", "scissorhands", "tova", "random", "streaming-llm"])
def test_lanes_of_different_budgets_replay_as_their_instances_and_step_on_alike(name):
    """Lanes whose budgets differ never agree on a fill: each lane replays as its instance does,
    and the bank is left as those replays leave the instances, stepping on alike."""
    trace = canonical_trace(steps=400)

    def specs() -> list:
        rng = np.random.default_rng(7)
        return [make_policy(name, b, recent_window=3, sinks=2, rng=rng) for b in (32, 48, 40)]

    bank, alone = make_bank(specs()), specs()
    got = replay_bank(bank, trace, 8)
    for r, p in zip(got, alone, strict=True):
        want = replay(p, trace, 8, record=False)
        assert r.mass.tobytes() == want.mass.tobytes()
        assert r.victim_pos.tobytes() == want.victim_pos.tobytes()
    rows = np.random.default_rng(0)
    for t in range(400, 440):
        attn = [rows.dirichlet(np.ones(len(p.kept))).astype(np.float32) for p in alone]
        bank.on_decode_step(t, attn if bank.reads_attention else None)
        bank.evict()
        for p, a in zip(alone, attn, strict=True):
            p.on_decode_step(t, a if p.reads_attention else None)
            p.evict()
    for i, p in enumerate(alone):
        assert bank[i].kept.tolist() == p.kept.tolist()
        assert bank[i].scores.tobytes() == p.scores.tobytes()
