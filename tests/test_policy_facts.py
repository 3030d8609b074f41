"""Facts about a method live on its class (``reads_attention``, ``pins_sinks``, ``own_window``,
``prefill_selection``), and the app reads them there, not from lists of names."""

from __future__ import annotations

import h2o
from app import controls
from app.lesson import chapters_7_10


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
    assert chapters_7_10.PINS_SINKS == ("streaming-llm",)
    assert controls.policy_settings("tova", 32, 4) == {}
    assert controls.policy_settings("h2o", 32, 4) == {"recent_window": 32}
    # a policy whose class says it keeps its own window is left alone, whatever its name
    monkeypatch.setattr(h2o.POLICIES["scissorhands"], "own_window", True)
    assert "recent_window" not in controls.policy_settings("scissorhands", 32, 4)


def test_a_class_declares_its_bank_and_a_subclass_runs_its_own_rule():
    """The bank tables are read from each class (``bank``), never inherited, and the compiled
    loops run the rule function a class has (``rule``, compiled as written): a subclass that
    changes the rule runs its own, never its parent's compiled loop."""
    import numpy as np
    import pytest

    from h2o.bank import BANKS, RingBank, ScoredBank, bank_class
    from h2o.bank.lane import lane_rule
    from h2o.policies import H2O, TOVA, RandomEviction, Scissorhands, SlidingWindow, StreamingLLM
    from h2o.policies.expected_attention import ExpectedAttention
    from h2o.policies.key_norm import KeyNorm
    from h2o.policies.kvzip import KVzip
    from h2o.policies.quest import Quest
    from h2o.policies.registry import BUILT_IN
    from h2o.policies.rule import no_score

    assert {c: c.declares("bank") for c in BUILT_IN} == {
        H2O: "scored", Scissorhands: "scored", TOVA: "scored", RandomEviction: "scored",
        StreamingLLM: "ring", SlidingWindow: "ring", KeyNorm: None, ExpectedAttention: None,
        KVzip: None, Quest: None,
    }  # fmt: skip
    assert {
        c: (ScoredBank if c.declares("bank") == "scored" else RingBank)
        for c in BUILT_IN
        if c.declares("bank")
    } == BANKS
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
    """``python -m h2o bench`` and All policies compare every method of ``BUILT_IN``: the lineup
    is read from the classes, so a new method is in it with no list to edit."""
    from h2o import analysis
    from h2o.policies import H2O
    from h2o.policies.registry import BUILT_IN

    lineup = analysis.standard_lineup(256)
    assert [n for n, _ in lineup] == [
        "h2o", "h2o", "streaming-llm", "scissorhands", "scissorhands", "tova", "sliding-window",
        "random",
    ]  # fmt: skip
    assert lineup[:2] == [("h2o", {"recent_window": 32}), ("h2o", {"recent_window": 64})]
    assert dict(lineup)["tova"] == {"recent_window": 1}  # its own window, not the lineup's
    assert dict(lineup)["streaming-llm"] == {"sinks": 4}
    assert dict(lineup)["sliding-window"] == {}
    assert dict(lineup)["random"] == {"recent_window": 32}
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
