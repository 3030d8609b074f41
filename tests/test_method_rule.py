"""The code a reader sees is the code that runs: a scored policy's rule is written once.

A scored class states its rule as one plain function, ``rule(score, attn, n)``; the instance's
step, :func:`h2o.replay`'s compiled loop, the lock-step banks and the model's closed loop all run
that function, compiled by numba as written. So for every class with a rule (the library's, read
from ``BUILT_IN``, and the example policy) the compiled replay is the stepwise one bit for bit,
and a rule edited in place moves every path's numbers together.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from test_replay_compiled import same_replays

from h2o import H2O, Trace, canonical_trace
from h2o.bank import lane, make_bank, replay_bank
from h2o.model.stack import cache_for
from h2o.policies.base import ScoredPolicy
from h2o.policies.registry import BUILT_IN
from h2o.policies.rule import compile_rule
from h2o.replay import replay, replay_stepwise

ROOT = Path(__file__).resolve().parents[1]


def _example() -> type[ScoredPolicy]:
    spec = importlib.util.spec_from_file_location("decayed_h2o", ROOT / "examples/decayed_h2o.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.DecayedH2O


RULED = [c for c in BUILT_IN if issubclass(c, ScoredPolicy) and c.rule is not None] + [_example()]


def random_trace(steps: int = 300, seed: int = 11) -> Trace:
    rng = np.random.default_rng(seed)
    rows = [rng.dirichlet(np.ones(t) * 0.3) for t in range(1, steps)]
    return Trace("random", np.concatenate([np.zeros(0), *rows]).astype(np.float32))


@pytest.fixture(scope="module")
def traces() -> list[Trace]:
    return [canonical_trace(), random_trace()]


def test_every_scored_class_with_a_rule_is_found():
    """The list is read from the registry, not written here: the card's three at least."""
    assert {"h2o", "scissorhands", "tova", "decayed-h2o"} <= {c.name for c in RULED}


@pytest.mark.parametrize("cls", RULED, ids=lambda c: c.name)
def test_the_compiled_replay_runs_the_classs_rule_bit_for_bit(cls, traces):
    """``h2o.replay`` takes the compiled loop for every class with a rule, and its kept
    positions, victims and float64 scores are the stepwise loop's (the instance's own steps)."""
    for trace in traces:
        for budget, window in ((64, 8), (200, 0)):
            a, b = cls(budget, recent_window=window), cls(budget, recent_window=window)
            assert lane.lane_rule(a) is not None  # the compiled path, not a fallback
            fast = replay(a, trace, 32, record=True)
            slow = replay_stepwise(b, trace, 32, record=True)
            same_replays(fast, slow, f"{cls.name} {trace.name} {budget} {window}")
            assert a.kept.tobytes() == b.kept.tobytes()
            assert a.scores.tobytes() == b.scores.tobytes()


def _edited(score, attn, n):
    score *= 0.9  # the student's edit: the old scores fade before the add
    for i in range(n):
        score[i] += attn[i]


def _numbers(trace: Trace) -> dict[str, object]:
    """What every path reports for H2O, whatever its rule is now."""
    windows = (1, 8)
    compiled = [replay(H2O(48, recent_window=w), trace, 16, record=True) for w in windows]
    stepwise = [replay_stepwise(H2O(48, recent_window=w), trace, 16, record=True) for w in windows]
    banked = replay_bank(make_bank([H2O(48, recent_window=w) for w in windows]), trace, 16)
    return {"compiled": compiled, "stepwise": stepwise, "banked": banked}


def test_an_edited_rule_moves_the_replay_and_the_bank(monkeypatch):
    """Edit H2O's rule in place: ``h2o.replay``, ``replay_bank`` and the stepwise loop all
    report the edited rule's numbers — they move, and they still agree with one another."""
    trace = random_trace(200, seed=3)
    before = _numbers(trace)
    monkeypatch.setattr(H2O, "rule", staticmethod(_edited))
    compiled = H2O.compiled_rule()
    assert compiled is not None and compiled.python is _edited  # compiled anew, not cached
    after = _numbers(trace)
    for i in range(2):
        same_replays(after["compiled"][i], after["stepwise"][i], "edited, compiled")
        got, want = after["banked"][i], after["stepwise"][i]
        np.testing.assert_array_equal(got.mass, want.mass, strict=True)
        np.testing.assert_array_equal(got.victim_pos, want.victim_pos, strict=True)
        old, new = before["stepwise"][i], after["stepwise"][i]
        assert not np.array_equal(old.kept_score, new.kept_score, equal_nan=True)
        assert not np.array_equal(old.victim_pos, new.victim_pos)
        same_replays(before["compiled"][i], old, "original")
    # the instance's step runs it too: one step of weights 1/2 on scores that were 1
    p = H2O(8, recent_window=0)
    for t, w in enumerate((None, [1.0], [0.5, 0.5])):
        p.on_decode_step(t, None if w is None else np.array(w, np.float32))
    assert p.scores.tolist() == [0.9 * 1.0 + 0.5, 0.5, 0.0]
    # and the lanes of a bank stepped by hand
    bank = make_bank([H2O(8, recent_window=0)])
    for t, w in enumerate((None, [[1.0]], [[0.5, 0.5]])):
        bank.on_decode_step(t, None if w is None else np.array(w, np.float32))
    assert bank.lane(0).scores.tolist() == [0.9 * 1.0 + 0.5, 0.5, 0.0]


def test_an_edited_rule_moves_the_model_bank(monkeypatch, tmp_path):
    """The model's closed loop (each layer's heads as one bank, the steady rows compiled)
    reports the edited rule's perplexity, equal to one instance per head."""
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from tiny_model import token_ids, write_tiny_gguf

    from h2o.model import SmolLM, make_policies, perplexity_under_eviction, policy_factory

    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path)
    model = SmolLM.load(path)
    ids = token_ids(48, seed=3)
    factory = policy_factory("h2o", 8, seed=5, recent_window=2)

    def both() -> tuple[np.ndarray, np.ndarray]:
        banked = perplexity_under_eviction(model, ids, factory).nll
        hidden = model.forward(
            ids[:-1], cache=cache_for(model.config, policies=make_policies(model, factory))
        )
        return banked, -model.token_logprobs(hidden, ids[1:])

    banked0, alone0 = both()
    monkeypatch.setattr(H2O, "rule", staticmethod(_edited))
    banked1, alone1 = both()
    assert banked0.tobytes() == alone0.tobytes() and banked1.tobytes() == alone1.tobytes()
    assert banked1.tobytes() != banked0.tobytes()


def test_a_rule_numba_cannot_compile_runs_as_written():
    """A numpy-heavy rule (``where=`` is not numba's) has no compiled form: it runs the
    stepwise loop, called from Python as written — here the same sums as H2O's."""

    class NumpyH2O(ScoredPolicy):
        name = "numpy-h2o"

        @staticmethod
        def rule(score, attn, n):
            np.add(score, attn, out=score, where=attn > 0)

    assert compile_rule(NumpyH2O.rule) is None and NumpyH2O.compiled_rule() is None
    assert lane.lane_rule(NumpyH2O(32, 4)) is None
    trace = random_trace(120)
    mine = replay(NumpyH2O(32, recent_window=4), trace, 8, record=True)
    same_replays(mine, replay(H2O(32, recent_window=4), trace, 8, record=True), "numpy rule")


def test_warm_compiles_every_built_in_rule():
    """``h2o.bank.warm`` (``make setup``, the app at start) leaves no built-in rule to
    compile: the first page only calls."""
    from h2o.bank import warm

    compile_rule.cache_clear()  # as a fresh server starts
    warm()
    misses = compile_rule.cache_info().misses
    for cls in RULED[:-1]:
        assert cls.compiled_rule() is not None
    assert compile_rule.cache_info().misses == misses
