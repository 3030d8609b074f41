"""K-norm stepped as it decodes (``h2o/policies/key_norm.py``) against a literal transcription of
its rule, and against kvpress's ``KnormPress`` (score ``-‖k‖``, keep the top ``B``) where the two
must agree: with no protected window, the set kept after the prompt is the one kvpress keeps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from h2o import POLICIES, canonical_trace, load_trace, replay
from h2o.model.rows import Row
from h2o.policies.key_norm import KeyNorm
from h2o.trace import Trace

ROOT = Path(__file__).resolve().parents[1]


def literal(norms, steps: int, budget: int, window: int) -> list[list[int]]:
    """The rule in its own words: admit each position with score -norm, never rescore; over
    budget, drop the lowest score (the largest norm) outside the last ``window`` kept, the lower
    position on equal scores. Returns the victims of each step."""
    kept: list[tuple[int, float]] = []
    out = []
    for t in range(steps):
        kept.append((t, -float(norms[t])))
        victims = []
        while len(kept) > budget:
            evictable = kept[: len(kept) - window]
            victim = min(evictable, key=lambda ps: (ps[1], ps[0]))
            kept.remove(victim)
            victims.append(victim[0])
        out.append(sorted(victims))
    return out


def _trace(norms: np.ndarray) -> Trace:
    T = len(norms)
    rng = np.random.default_rng(3)
    rows = [rng.dirichlet(np.ones(t)) if t else np.zeros(0) for t in range(T)]
    return Trace.from_rows("random", rows, key_norms=norms)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("budget", "window"), [(8, 0), (8, 3), (16, 8), (5, 4)])
def test_the_policy_evicts_as_the_literal_rule_does(seed, budget, window):
    rng = np.random.default_rng(seed)
    norms = rng.gamma(2.0, 3.0, 120)
    if seed % 2:
        norms = np.round(norms)  # equal norms: the lower position goes first
    rep = replay(KeyNorm(budget, window), _trace(norms))
    want = literal(norms, 120, budget, window)
    for t in range(120):
        assert [p for p, _ in rep.victims_at(t)] == want[t], t
    kept, scores = rep.kept_at(119)
    np.testing.assert_array_equal(scores, -norms[kept].astype(np.float32).astype(np.float64))


def test_with_no_window_it_keeps_what_kvpress_keeps_after_the_prompt():
    """kvpress's KnormPress: ``scores = -keys.norm(dim=-1)``, keep ``topk(scores, B)``."""
    norms = np.random.default_rng(9).permutation(np.linspace(1.0, 9.0, 200))  # distinct
    rep = replay(KeyNorm(32, 0), _trace(norms))
    held, _ = rep.kept_at(199)  # before the last step's eviction
    kept = np.setdiff1d(held, [p for p, _ in rep.victims_at(199)])
    scores = -norms  # kvpress: the highest scores are kept
    kvpress = np.sort(np.argsort(-scores, kind="stable")[:32])
    np.testing.assert_array_equal(np.sort(kept), kvpress)


def test_it_reads_no_attention():
    norms = np.random.default_rng(2).gamma(2.0, 3.0, 60)
    a = replay(KeyNorm(10, 2), _trace(norms))
    b = replay(KeyNorm(10, 2), Trace.from_packed("flat", _flat(60), key_norms=norms))
    np.testing.assert_array_equal(a.victim_pos, b.victim_pos)
    assert not KeyNorm.reads_attention and POLICIES["key-norm"] is KeyNorm


def _flat(T: int) -> np.ndarray:
    return np.concatenate([np.full(t, 1.0 / t, dtype=np.float32) for t in range(1, T)])


def test_a_trace_without_key_norms_is_refused_by_name():
    with pytest.raises(ValueError, match="K-norm reads each position's key_norms, which 'canon"):
        replay(KeyNorm(64), canonical_trace())
    assert not KeyNorm.runs_on(canonical_trace()) and not KeyNorm.runs_on(None)
    p = KeyNorm(4, 1)
    with pytest.raises(ValueError, match="K-norm scores position 0 by its key's norm and has no"):
        p.on_decode_step(0, None)
    assert len(p) == 0 and p.last_pos == -1  # refused, nothing changed
    with pytest.raises(ValueError, match="finite, non-negative"):
        KeyNorm(4, 1, key_norms=[1.0, -1.0])


def test_it_runs_on_every_shipped_captured_trace_and_the_model_refuses_it():
    for path in sorted((ROOT / "traces").glob("*.npz")):
        trace = load_trace(path)
        assert KeyNorm.runs_on(trace)
        rep = replay(KeyNorm(128), trace, record=False)
        assert rep.summary()["evictions"] == trace.steps - 128
    with pytest.raises(ValueError, match="knorm@B runs K-norm on the model"):
        Row.parse("key-norm@128")


def test_the_sinks_have_the_smallest_key_norms_on_the_shipped_layer_8_traces():
    """The paper's observation, on the traces the app steps: the first position (the sink)
    holds a low-norm key, so K-norm keeps it without reading attention."""
    for name in ("lighthouse-L8-mean.npz", "library-L8-mean.npz"):
        norms = load_trace(ROOT / "traces" / name).key_norms
        assert norms[0] <= np.quantile(norms, 0.05)


def test_the_player_colours_its_panel_by_its_score():
    """Its scores are minus a key's norm, all below 0: the player colours its panel by them (a
    range from its lowest to its highest score, shared with no other kind of score), beside an
    H2O panel whose scale still starts at 0 and a StreamingLLM panel that has no score."""
    from h2o import H2O, StreamingLLM
    from h2o.player import playback

    trace = load_trace(ROOT / "traces" / "lighthouse-L8-mean.npz")
    reps = [
        replay(KeyNorm(128, recent_window=32), trace),
        replay(H2O(128, recent_window=32), trace),
        replay(StreamingLLM(128, sinks=4), trace),
    ]
    ranges = playback.colour_ranges([playback.Panel(r.label, "#000", r) for r in reps])
    ks = reps[0].kept_score[np.isfinite(reps[0].kept_score)]
    assert ranges[0] == (pytest.approx(float(ks.min())), pytest.approx(float(ks.max())))
    assert ranges[0][1] < 0
    assert ranges[1][0] == 0.0 and ranges[1][1] > 0
    assert ranges[2] is None
    block = playback.range_block(reps[0], trace, 200, 260)
    assert "scores" in block.arrays  # the browser gets the scores it colours by
