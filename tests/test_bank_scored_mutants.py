"""Bank and replay behaviour the other bank tests leave unchecked (found by mutation testing).

A scored bank refuses mixed classes with a message naming the four it holds; its storage is
the card's 13 bytes a slot (int32 position, float64 score, one byte of eviction scratch) and,
like an instance's, is never grown while every step is evicted; its trusted step takes weights
unchecked, as each lane's ``advance_trusted`` does. A ring bank's lanes outgrow their budget and
evict like their instances, also in lock-step with lanes of different sinks. A replay refuses a
policy that has taken steps even when ``drop`` has emptied it, and names its
policy (label, parameters, whether it reads attention) and its trace, and every array it holds
is read-only.
"""

from __future__ import annotations

import re
import tracemalloc

import numpy as np
import pytest

from h2o import H2O, TOVA, SlidingWindow, StreamingLLM, Trace, replay
from h2o.bank import make_bank
from h2o.replay import replay_stepwise


def state(policies) -> list:
    return [(p.kept.tolist(), p.scores.tobytes(), p.last_pos) for p in policies]


def test_a_mixed_scored_bank_is_refused_with_the_classes_it_holds():
    want = "a scored bank holds policies of one class: H2O, Scissorhands, TOVA or RandomEviction"
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        make_bank([H2O(budget=4, recent_window=1), TOVA(budget=4, recent_window=1)])


def test_the_trusted_step_takes_weights_unchecked_as_each_lanes_own_does():
    """``advance_trusted`` is ``on_decode_step`` without its checks: a weight the check would
    refuse (above any softmax output) is folded in, as an instance's ``advance_trusted`` does."""
    specs = [dict(budget=4, recent_window=1), dict(budget=4, recent_window=2)]
    bank = make_bank([H2O(**s) for s in specs])
    alone = [H2O(**s) for s in specs]
    rng = np.random.default_rng(3)
    for t in range(9):
        n = int(bank.fills[0])
        block = rng.random((2, n)).astype(np.float32) * 1.5 if n else None
        if n:
            block[:, 0] = 1.5  # above MAX_WEIGHT: refused by the checked step
        bank.advance_trusted(t, block)
        bank.evict_trusted()
        for i, p in enumerate(alone):
            p.advance_trusted(t, None if block is None else block[i])
            p.evict()
        assert bank.last_pos == t
        assert state(bank) == state(alone)


def test_a_scored_bank_stores_13_bytes_a_slot():
    """The card: per slot 4 bytes of position, 8 of score and 1 of eviction scratch; a bank's
    storage is one such row per lane, of ``budget + 1`` slots."""
    lanes, budget = 40, 9999
    specs = [H2O(budget=budget, recent_window=1 + i) for i in range(lanes)]
    tracemalloc.start()
    try:
        bank = make_bank(specs)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    slots = lanes * (budget + 1)
    assert bank.positions.shape == (lanes, budget + 1)
    assert 13 * slots <= held < 14 * slots


@pytest.mark.parametrize(
    "specs",
    [
        [H2O(budget=4, recent_window=1), H2O(budget=6, recent_window=2)],
        [TOVA(budget=6, recent_window=1), TOVA(budget=3, recent_window=1)],
        [StreamingLLM(budget=4, sinks=1), SlidingWindow(budget=6)],
    ],
    ids=["h2o", "tova", "ring"],
)
@pytest.mark.parametrize("rows", [False, True], ids=["no attention", "one row per lane"])
def test_storage_never_grows_while_every_step_is_evicted(specs, rows):
    """Storage is preallocated to ``budget + 1`` slots and only grows if a caller admits past
    that without evicting: stepping and evicting every step never reallocates it."""
    bank = make_bank(specs)
    alone = [type(p)(**p.params()) for p in specs]
    cap = max(p.budget for p in specs) + 1
    rng = np.random.default_rng(1)
    for t in range(20):
        attn = [rng.dirichlet(np.ones(n)) if n else None for n in bank.fills] if rows else None
        bank.on_decode_step(t, attn)
        bank.evict()
        for i, p in enumerate(alone):
            p.on_decode_step(t, None if attn is None else attn[i])
            p.evict()
        assert bank.positions.shape == (len(specs), cap)
    assert state(bank) == state(alone)


def test_a_ring_bank_admits_past_its_budget_then_evicts_like_its_lanes():
    specs = [
        StreamingLLM(budget=3, sinks=1),
        SlidingWindow(budget=3),
        StreamingLLM(budget=3, sinks=2),
    ]
    bank = make_bank(specs)
    alone = [type(p)(**p.params()) for p in specs]
    for t in range(11):  # past budget + 1 without evicting: the storage grows
        bank.on_decode_step(t, None)
        for p in alone:
            p.on_decode_step(t, None)
    assert [p.kept.tolist() for p in bank] == [list(range(11))] * 3
    assert bank.evict() == [p.evict() for p in alone]
    assert state(bank) == state(alone)


@pytest.mark.parametrize("sinks", [(1, 2), (2, 1, 2), (0, 1, 3)], ids=str)
def test_ring_lanes_of_different_sinks_evict_together_like_their_instances(sinks):
    """One budget, so every lane evicts one a step in lock-step; each keeps its own sinks."""
    specs = [StreamingLLM(budget=5, sinks=s) for s in sinks]
    bank = make_bank(specs)
    alone = [StreamingLLM(**p.params()) for p in specs]
    for t in range(14):
        bank.on_decode_step(t, None)
        got = bank.evict()
        for p in alone:
            p.on_decode_step(t, None)
        assert got == [p.evict() for p in alone]
        assert [p.kept.tolist() for p in bank] == [p.kept.tolist() for p in alone]


def twelve_steps() -> Trace:
    rng = np.random.default_rng(2)
    return Trace.from_dense("twelve steps", np.tril(rng.random((12, 12)), -1), normalize=True)


@pytest.mark.parametrize("run", [replay, replay_stepwise], ids=["replay", "replay_stepwise"])
@pytest.mark.parametrize("steps", [1, 3])
def test_a_policy_that_took_steps_is_not_fresh_even_once_emptied(run, steps):
    """``replay`` needs a fresh policy, nothing admitted yet: one that admitted positions and
    dropped them all (``drop``) holds none, but has taken steps."""
    policy = SlidingWindow(budget=4)
    for t in range(steps):
        policy.on_decode_step(t, None)
    assert policy.drop(steps) == list(range(steps))
    assert len(policy) == 0 and policy.last_pos == steps - 1
    with pytest.raises(ValueError, match="replay needs a fresh policy"):
        run(policy, twelve_steps(), top_k=3)


@pytest.mark.parametrize("run", [replay, replay_stepwise], ids=["replay", "replay_stepwise"])
def test_a_replay_names_its_policy_parameters_and_trace(run):
    r = run(H2O(budget=4, recent_window=2), twelve_steps(), top_k=3)
    assert r.label == "H2O"
    assert r.params == {"budget": 4, "recent_window": 2}
    assert r.trace_name == "twelve steps"
    assert r.policy == "h2o" and r.steps == 12 and r.budget == 4


@pytest.mark.parametrize("run", [replay, replay_stepwise], ids=["replay", "replay_stepwise"])
@pytest.mark.parametrize(
    ("policy", "reads"),
    [(H2O(budget=4, recent_window=2), True), (StreamingLLM(budget=4, sinks=1), False)],
    ids=["h2o", "streaming-llm"],
)
def test_a_replay_records_whether_its_policy_reads_attention(run, policy, reads):
    r = run(type(policy)(**policy.params()), twelve_steps(), top_k=3)
    assert r.reads_attention is reads


@pytest.mark.parametrize("run", [replay, replay_stepwise], ids=["replay", "replay_stepwise"])
def test_every_array_of_a_replay_is_read_only(run):
    r = run(H2O(budget=4, recent_window=2), twelve_steps(), top_k=3)
    names = ["mass", "recall", "oracle", "n_kept", "victim_step", "victim_pos", "victim_score"]
    for name in [*names, "kept_pos", "kept_score"]:
        a = getattr(r, name)
        assert a.shape[0] == (8 if name.startswith("victim") else 12), name  # one victim a step
        assert not a.flags.writeable, name
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 0
