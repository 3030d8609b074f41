"""Facts about a method live on its class (``reads_attention``, ``pins_sinks``, ``own_window``,
``evicts_by``, ``score_counts``, ``bank``, ``prefill_selection``), and the app reads them there,
not from lists of names.

Each fact is tested by what it does, for every registered class (``BUILT_IN``, read here, never
written out): a class that declares a bank runs in it with its instances' numbers, one that pins
sinks keeps them, one that evicts by age or by score evicts the oldest or the lowest. The checks
that name a method (StreamingLLM pins sinks, TOVA keeps its own window) say what must hold of
it, and hold whatever other class is added.
"""

from __future__ import annotations

import numpy as np
import pytest

import h2o
from app import controls
from app.lesson import chapters_7_10
from h2o import Trace
from h2o.policies.registry import BUILT_IN, build


def random_trace(steps: int = 160, seed: int = 5) -> Trace:
    """Attention rows of every length, peaked (a Dirichlet of 0.3): scores spread and cross."""
    rng = np.random.default_rng(seed)
    rows = [rng.dirichlet(np.ones(t) * 0.3) for t in range(1, steps)]
    return Trace("random", np.concatenate([np.zeros(0), *rows]).astype(np.float32))


def instance(cls: type, budget: int = 16, window: int = 4, seed: int = 0) -> h2o.Policy:
    """``cls`` at one set of controls, each taken if the class has it (as the app builds one)."""
    return build(cls, budget, recent_window=window, sinks=2, rng=np.random.default_rng(seed))


#: The classes a trace of attention alone can run (K-norm, KVzip and Expected Attention read
#: what the model's trace carries; their facts are tested on such traces in their own files),
#: Quest aside: it holds everything and evicts nothing.
EVICTING = [c for c in BUILT_IN if c.runs_on(None) and not c.selects]


def ids(c: type) -> str:
    return c.name


def test_the_facts_of_the_built_in_policies():
    facts = {
        n: (c.reads_attention, c.pins_sinks, c.own_window, getattr(c, "prefill_selection", False))
        for n, c in h2o.POLICIES.items()
    }
    assert facts["streaming-llm"] == (False, True, False, False)
    assert facts["tova"] == (True, False, True, False)
    assert facts["h2o"] == (True, False, False, True)
    assert facts["sliding-window"] == (False, False, False, False)


def test_the_app_reads_them_from_the_class(monkeypatch):
    assert tuple(c.name for c in BUILT_IN if c.pins_sinks) == chapters_7_10.PINS_SINKS
    assert "streaming-llm" in chapters_7_10.PINS_SINKS
    assert controls.policy_settings("tova", 32, 4) == {}
    assert controls.policy_settings("h2o", 32, 4) == {"recent_window": 32}
    # a policy whose class says it keeps its own window is left alone, whatever its name
    monkeypatch.setattr(h2o.POLICIES["scissorhands"], "own_window", True)
    assert "recent_window" not in controls.policy_settings("scissorhands", 32, 4)


# -- each fact by what it does, for every registered class -----------------------------------------
@pytest.mark.parametrize("cls", [c for c in EVICTING if c.pins_sinks], ids=ids)
def test_a_class_that_pins_sinks_keeps_them(cls):
    rep = h2o.replay(instance(cls), random_trace(), record=True)
    assert rep.sinks == 2 and rep.victim_pos.size
    assert (rep.kept_pos[2:, :2] == [0, 1]).all()  # every step, the first two positions
    assert rep.victim_pos.min() >= 2


@pytest.mark.parametrize("cls", [c for c in EVICTING if not c.pins_sinks], ids=ids)
def test_a_class_that_pins_no_sinks_pins_none(cls):
    rep = h2o.replay(instance(cls), random_trace(), record=True)
    assert rep.sinks == 0


@pytest.mark.parametrize("cls", [c for c in EVICTING if c.evicts_by in ("age", "score")], ids=ids)
def test_a_class_evicts_the_oldest_or_the_lowest_as_it_says(cls):
    """Outside the pinned sinks and the protected recent window: the oldest position ("age"), or
    the lowest score, ties to the lower position ("score": the card's argmin)."""
    rep = h2o.replay(instance(cls), random_trace(), record=True)
    steps, counts = np.unique(rep.victim_step, return_counts=True)
    assert steps.size > 50
    for s in steps[counts == 1]:
        n = int(rep.n_kept[s])
        pos, score = rep.kept_pos[s, :n], rep.kept_score[s, :n]
        lo, hi = rep.sinks, n - rep.window
        victim = int(rep.victim_pos[rep.victim_step == s][0])
        if cls.evicts_by == "age":
            assert victim == pos[lo], (s, victim, pos)
        else:
            least = score[lo:hi].min()
            assert victim == pos[lo:hi][score[lo:hi] == least][0], (s, victim, pos, score)


@pytest.mark.parametrize("cls", [c for c in EVICTING if not c.reads_attention], ids=ids)
def test_a_class_that_reads_no_attention_evicts_the_same_whatever_the_attention(cls):
    a, b = random_trace(seed=5), random_trace(seed=6)
    ra = h2o.replay(instance(cls, seed=3), a, record=False)
    rb = h2o.replay(instance(cls, seed=3), b, record=False)
    assert np.array_equal(ra.victim_pos, rb.victim_pos) and ra.victim_pos.size
    assert not ra.reads_attention


@pytest.mark.parametrize("cls", [c for c in EVICTING if c.declares("score_counts")], ids=ids)
def test_a_class_that_counts_scores_whole_numbers(cls):
    rep = h2o.replay(instance(cls), random_trace(), record=True)
    shown = rep.kept_score[np.isfinite(rep.kept_score)]
    assert shown.size and np.array_equal(shown, np.round(shown))


@pytest.mark.parametrize("cls", [c for c in BUILT_IN if c.own_window], ids=ids)
def test_a_class_with_its_own_window_keeps_it_in_the_comparison(cls):
    (settings,) = cls.bench_settings(256, [32, 64])
    assert settings["recent_window"] == cls.default_recent_window


@pytest.mark.parametrize("cls", BUILT_IN, ids=ids)
def test_a_class_runs_in_the_bank_it_declares_with_its_instances_numbers(cls):
    """A class that names a bank runs there, lanes of it in lock step, with the numbers of its
    instances replayed one by one; one that names none is held by no bank, and the facts are the
    class's own, never inherited."""
    from h2o.bank import BANK_KINDS, BANKS, bank_class, make_bank

    kind = cls.declares("bank")
    if kind is None:
        assert cls not in BANKS
        with pytest.raises(ValueError, match=f"no bank holds {cls.__name__} policies"):
            bank_class(build(cls, 256, recent_window=4))
        return
    assert BANKS[cls] is BANK_KINDS[kind]
    trace = random_trace()
    specs = [instance(cls, 16, w, seed=1) for w in (2, 4, 8)]
    assert bank_class(specs[0]) is BANK_KINDS[kind]
    lanes = make_bank(specs).replay(trace, 8)
    alone = [h2o.replay(instance(cls, 16, w, seed=1), trace, 8, record=False) for w in (2, 4, 8)]
    for got, want in zip(lanes, alone, strict=True):
        assert np.array_equal(got.mass, want.mass)
        assert np.array_equal(got.victim_pos, want.victim_pos)
        assert np.array_equal(got.victim_step, want.victim_step)


def test_the_card_classes_declare_their_banks():
    """The card's methods, and the sinks' ring, run in lock step (what the sweeps' speed needs)."""
    from h2o.policies import H2O, TOVA, RandomEviction, Scissorhands, SlidingWindow, StreamingLLM

    for c in (H2O, Scissorhands, TOVA, RandomEviction):
        assert c.declares("bank") == "scored", c
    for c in (StreamingLLM, SlidingWindow):
        assert c.declares("bank") == "ring", c


def test_a_subclass_runs_its_own_rule():
    """The compiled loops run the rule function a class has (``rule``, compiled as written): a
    subclass that changes the rule runs its own, never its parent's compiled loop."""
    from h2o.bank import bank_class
    from h2o.bank.lane import lane_rule
    from h2o.policies import H2O, TOVA, RandomEviction, Scissorhands, SlidingWindow, StreamingLLM
    from h2o.policies.rule import no_score

    # the rule as the card's classes write it, compiled from that function: H2O adds,
    # Scissorhands votes above the fair share (1/3 here), TOVA replaces
    attn = np.array([0.5, 0.25, 0.25], dtype=np.float32)
    got = {}
    for c in (H2O, Scissorhands, TOVA):
        compiled = c.compiled_rule()
        assert compiled is not None and compiled.python is c.rule
        score = np.ones(3)
        compiled.jit(score, attn, 3)
        got[c] = score.tolist()
    assert got == {H2O: [1.5, 1.25, 1.25], Scissorhands: [2.0, 1.0, 1.0], TOVA: [0.5, 0.25, 0.25]}
    assert RandomEviction.compiled_rule() is None
    for ring in (SlidingWindow(8), StreamingLLM(8)):
        is_ring, rule = lane_rule(ring)
        assert is_ring and rule == no_score().f32

    class Mine(H2O):
        name = "mine"

        def _accumulate(self, score, attn):
            score += 2 * attn

    assert Mine.compiled_rule() is None and lane_rule(Mine(8, 2)) is None
    with pytest.raises(ValueError, match="no bank holds Mine policies"):
        bank_class(Mine(8, 2))

    class Twice(H2O):
        name = "twice"

        @staticmethod
        def rule(score, attn, n):
            for i in range(n):
                score[i] += 2 * attn[i]

    compiled = Twice.compiled_rule()
    assert compiled is not None and compiled.python is Twice.rule is not H2O.rule
    assert Twice.declares("bank") is None and lane_rule(Twice(8, 2)) is not None


def test_the_standard_lineup_is_every_built_in_class_at_the_settings_it_names(monkeypatch):
    """``python -m h2o bench`` and All policies compare every method of ``BUILT_IN`` that a trace
    of attention alone can run, in the registry's order, each at its ``bench_settings``: the
    lineup is read from the classes, so a new method is in it with no list to edit."""
    from h2o import analysis
    from h2o.policies import H2O

    lineup = analysis.standard_lineup(256)
    order = [c.name for c in BUILT_IN]
    names = [n for n, _ in lineup]
    assert names == sorted(names, key=order.index)  # the registry's order
    for cls in BUILT_IN:
        shown = [s for n, s in lineup if n == cls.name]
        if cls.selects or not cls.runs_on(None):  # Quest; K-norm needs its trace's key norms
            assert not shown, cls.name
        else:
            assert shown == cls.bench_settings(256, [32, 64]), cls.name
    assert lineup[:2] == [("h2o", {"recent_window": 32}), ("h2o", {"recent_window": 64})]
    assert dict(lineup)["tova"] == {"recent_window": 1}  # its own window, not the lineup's
    assert dict(lineup)["streaming-llm"] == {"sinks": 4}
    assert dict(lineup)["sliding-window"] == {}
    assert dict(lineup)["random"] == {"recent_window": 32}
    assert {"h2o", "streaming-llm", "scissorhands", "tova", "sliding-window", "random"} <= set(
        names
    )
    assert not {"key-norm", "kvzip", "expected-attention", "quest"} & set(names)
    # a tiny budget: the windows that fit, or a quarter of it; sinks below the budget
    small = analysis.standard_lineup(8, windows=(32, 64))
    assert dict(small)["h2o"] == {"recent_window": 2} and dict(small)["streaming-llm"] == {
        "sinks": 4
    }
    assert dict(analysis.standard_lineup(4, windows=(32,)))["streaming-llm"] == {"sinks": 3}

    class Newcomer(H2O):
        name = "newcomer"

        @classmethod
        def bench_settings(cls, budget, windows):
            return [{"recent_window": windows[-1]}]

    monkeypatch.setattr("h2o.analysis.BUILT_IN", (*BUILT_IN, Newcomer))
    assert analysis.standard_lineup(256)[-1] == ("newcomer", {"recent_window": 64})
