"""What every bank shares (``h2o/bank/base.py``), at the edges its other tests leave open.

A bank class refuses, by name, what ``make_bank`` refuses: no policies, something not a policy,
a policy that has taken steps (even one that keeps nothing); a fresh bank has taken no step and
reads attention as its lanes do; its ``budgets`` are its lanes' and read-only.
``lockstep_fill`` is every lane's fill, or -1 when the fills differ — also after steps taken
lane by lane; the trusted step takes one row per lane, as the instances take them; a bank of one
lane refuses attention of the wrong form or row count with the same message as a bank of many;
``positions`` holds each lane's kept positions even after admitting past the budget without
evicting; and the storage does not grow while every lane evicts to its budget (a lane's storage
is its policy's, which only grows when a caller admits past ``budget + 1`` without evicting).
"""

from __future__ import annotations

import numpy as np
import pytest

from h2o.analysis import make_policy
from h2o.bank import BANKS, RingBank, ScoredBank, bank_class, make_bank


def lanes(name: str, budgets, windows=None) -> list:
    windows = windows or [1] * len(budgets)
    return [
        make_policy(name, b, recent_window=w, sinks=w, rng=np.random.default_rng(i))
        for i, (b, w) in enumerate(zip(budgets, windows, strict=True))
    ]


def uniform(n: int) -> np.ndarray:
    return np.full(n, 1 / n, np.float32) if n else np.zeros(0, np.float32)


def snapshot(bank) -> list:
    return [(p.kept.tolist(), p.scores.tobytes(), p.last_pos) for p in bank]


@pytest.mark.parametrize("cls", [ScoredBank, RingBank])
def test_a_bank_class_refuses_no_policies_or_something_else_by_name(cls):
    with pytest.raises(ValueError) as e:
        cls([])
    assert str(e.value) == "a bank needs at least one policy"  # make_bank's own words
    with pytest.raises(ValueError) as e:
        cls([object()])
    assert "h2o policies" in str(e.value) and "<class 'object'>" in str(e.value)


@pytest.mark.parametrize("last_pos", [0, 5])
def test_a_policy_that_has_taken_steps_is_refused_even_when_it_keeps_nothing(last_pos):
    """Fresh means no step taken: nothing kept and no position admitted (``last_pos`` -1)."""
    used = make_policy("h2o", 8, recent_window=2)
    used.resume(np.zeros(0, np.int32), np.zeros(0), last_pos)  # an engine's steps, none kept
    assert len(used) == 0 and used.last_pos == last_pos
    for specs in ([used], [make_policy("h2o", 8, recent_window=2), used]):
        with pytest.raises(ValueError) as e:
            make_bank(specs)
        assert str(e.value) == "a bank is built from fresh policies (this one has taken steps)"


@pytest.mark.parametrize("name", ["h2o", "streaming-llm"])
@pytest.mark.parametrize("size", [1, 3], ids=["one lane", "three lanes"])
def test_a_fresh_bank_has_taken_no_step(name, size):
    bank = make_bank(lanes(name, (4,) * size))
    assert bank.last_pos == -1 and bank.lockstep_fill == 0 and bank.fills.tolist() == [0] * size
    assert all(p.last_pos == -1 and len(p) == 0 for p in bank)
    assert bank.reads_attention is bank[0].reads_attention is (name == "h2o")
    bank.on_decode_step(0, None)
    assert bank.last_pos == 0 and bank.fills.tolist() == [1] * size


def test_a_banks_budgets_are_its_lanes_and_read_only():
    """Like every array the library hands out (a lane's ``kept``, an allocation's budgets)."""
    bank = make_bank(lanes("h2o", (4, 6, 4)))
    assert bank.budgets.tolist() == [p.budget for p in bank] == [4, 6, 4]
    assert not bank.budgets.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        bank.budgets[0] = 8


@pytest.mark.parametrize("name", ["h2o", "random", "streaming-llm"])
def test_lockstep_fill_is_every_lanes_fill_or_minus_one_when_they_differ(name):
    # one budget, every step lane by lane (one row per lane): the fills stay equal
    bank = make_bank(lanes(name, (4, 4, 4)))
    for t in range(8):
        bank.on_decode_step(t, [uniform(n) for n in bank.fills.tolist()])
        bank.evict()
        assert bank.fills.tolist() == [min(t + 1, 4)] * 3
        assert bank.lockstep_fill == min(t + 1, 4), t
    # two budgets: equal fills until the smaller one is reached, then -1
    bank = make_bank(lanes(name, (3, 5)))
    for t in range(8):
        bank.on_decode_step(t, None)
        bank.evict()
        fills = bank.fills.tolist()
        assert fills == [min(t + 1, 3), min(t + 1, 5)]
        assert bank.lockstep_fill == (fills[0] if fills[0] == fills[1] else -1), t
    assert bank.lockstep_fill == -1


@pytest.mark.parametrize("name", ["h2o", "scissorhands", "tova", "random"])
def test_the_trusted_step_takes_one_row_per_lane_as_the_instances(name):
    """``advance_trusted`` takes a block, rows or None; rows (some None) step each lane as its
    instance's ``on_decode_step``, also while the lanes are in lock-step."""

    def make():
        return lanes(name, (6, 6, 6), (1, 2, 4))

    policies, bank = make(), make_bank(make())
    rng = np.random.default_rng(3)
    for t in range(30):
        n = len(policies[0])
        rows = [rng.dirichlet(np.ones(n)).astype(np.float32) if n else uniform(0) for _ in policies]
        if t % 4 == 1:
            rows[1] = None
        for p, a in zip(policies, rows, strict=True):
            p.on_decode_step(t, a)
            p.evict()
        assert bank.lockstep_fill == n
        bank.advance_trusted(t, rows)
        bank.evict_trusted()
        assert bank.last_pos == t and bank.lockstep_fill == len(policies[0])
        for i, p in enumerate(policies):
            assert bank[i].kept.tolist() == p.kept.tolist(), (t, i)
            assert bank[i].scores.tobytes() == p.scores.tobytes(), (t, i)
            assert bank[i].last_pos == p.last_pos == t, (t, i)


@pytest.mark.parametrize("size", [1, 3], ids=["one lane", "three lanes"])
@pytest.mark.parametrize(
    ("attn", "what"),
    [
        (np.ones(1, np.float32), "<class 'numpy.ndarray'> of shape (1,)"),
        (np.ones((1, 1, 1), np.float32), "<class 'numpy.ndarray'> of shape (1, 1, 1)"),
        ("a", "<class 'str'> of shape ()"),
    ],
)
def test_attention_of_no_per_lane_form_is_refused_alike_by_one_lane_or_many(size, attn, what):
    bank = make_bank(lanes("h2o", (8,) * size))
    bank.on_decode_step(0, None)
    before = snapshot(bank)
    with pytest.raises(ValueError) as e:
        bank.on_decode_step(1, attn)
    assert str(e.value) == f"attn must be None, an (N, n) array or one row per lane, got {what}"
    assert snapshot(bank) == before and bank.last_pos == 0


@pytest.mark.parametrize("size", [1, 3], ids=["one lane", "three lanes"])
@pytest.mark.parametrize("as_block", [True, False], ids=["block", "rows"])
def test_attention_with_a_row_too_many_is_refused_by_its_row_count(size, as_block):
    bank = make_bank(lanes("h2o", (8,) * size))
    bank.on_decode_step(0, None)  # every lane keeps one position: rows of length 1 fit
    before = snapshot(bank)
    block = np.ones((size + 1, 1), np.float32)
    with pytest.raises(ValueError) as e:
        bank.on_decode_step(1, block if as_block else list(block))
    assert str(e.value) == f"attn has {size + 1} rows for {size} lanes"
    assert snapshot(bank) == before and bank.last_pos == 0


@pytest.mark.parametrize("name", ["h2o", "streaming-llm"])
@pytest.mark.parametrize("size", [1, 3], ids=["one lane", "three lanes"])
def test_positions_hold_every_lanes_kept_while_admitting_past_the_budget(name, size):
    """``positions``: lane ``i``'s kept positions are the first ``fills[i]`` of row ``i`` —
    also when steps admit far past ``budget + 1`` without evicting, and after the eviction."""

    def make():
        return lanes(name, (3,) * size)

    policies, bank = make(), make_bank(make())

    def agree():
        assert bank.fills.tolist() == [len(p) for p in policies]
        for i, p in enumerate(policies):
            assert bank.positions[i, : len(p)].tolist() == p.kept.tolist(), i
            assert bank.kept(i).tolist() == p.kept.tolist(), i

    rng = np.random.default_rng(5)
    for t in range(12):
        n = len(policies[0])
        block = rng.dirichlet(np.ones(n), size=size).astype(np.float32) if n else None
        for i, p in enumerate(policies):
            p.on_decode_step(t, None if block is None else block[i])
        bank.on_decode_step(t, block)
        agree()
    assert bank.evict() == [p.evict() for p in policies]
    agree()


@pytest.mark.parametrize("name", ["h2o", "random", "streaming-llm"])
@pytest.mark.parametrize(
    "budgets", [(5,), (5, 5, 5), (3, 5)], ids=["one lane", "one budget", "two budgets"]
)
@pytest.mark.parametrize("per_lane", [False, True], ids=["none", "rows"])
def test_storage_does_not_grow_while_every_lane_evicts_to_its_budget(name, budgets, per_lane):
    """Step and evict, many times: the storage a bank starts with (room for each lane's
    ``budget + 1``) is never reallocated larger, one lane or many, in lock-step or lane by lane."""
    bank = make_bank(lanes(name, budgets))
    shape = bank.positions.shape
    assert shape[0] == len(budgets) and shape[1] >= max(budgets) + 1
    for t in range(40):
        rows = [uniform(n) for n in bank.fills.tolist()] if per_lane else None
        bank.on_decode_step(t, rows)
        bank.evict()
        assert bank.fills.tolist() == [min(t + 1, b) for b in budgets]
        assert bank.positions.shape == shape, t


def test_make_bank_and_bank_class_refuse_in_words():
    """No policy, or a class no bank holds: the message says so, and names the classes that
    banks do hold, comma-separated."""
    with pytest.raises(ValueError) as e:
        make_bank([])
    assert str(e.value) == "a bank needs at least one policy"
    with pytest.raises(ValueError) as e:
        bank_class(object())
    names = ", ".join(c.__name__ for c in BANKS)
    assert str(e.value) == (
        f"no bank holds object policies: banks run the library's own classes ({names}); "
        "step it one instance at a time"
    )
    assert "H2O, " in names
