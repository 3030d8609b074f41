"""KVzip stepped as it decodes (``h2o/policies/kvzip.py``) against a literal transcription of its
rule, and against kvpress's ``KVzipPress`` choice where the two must agree: with no protected
window, the set kept at the end is the top ``B`` scores of the head (one layer, one KV head)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from h2o import POLICIES, canonical_trace, load_trace, replay
from h2o.model.caches.kvzip_cache import kvzip_keep
from h2o.model.rows import Row
from h2o.policies.kvzip import KVzip
from h2o.trace import Trace

ROOT = Path(__file__).resolve().parents[1]


def literal(scores, steps: int, budget: int, window: int) -> list[list[int]]:
    """Admit each position with its KVzip score, never rescore; over budget, drop the lowest
    score outside the last ``window`` kept, the lower position on equal scores."""
    kept: list[tuple[int, float]] = []
    out = []
    for t in range(steps):
        kept.append((t, float(np.float32(scores[t]))))
        victims = []
        while len(kept) > budget:
            victim = min(kept[: len(kept) - window], key=lambda ps: (ps[1], ps[0]))
            kept.remove(victim)
            victims.append(victim[0])
        out.append(sorted(victims))
    return out


def _trace(scores: np.ndarray) -> Trace:
    rng = np.random.default_rng(3)
    rows = [rng.dirichlet(np.ones(t)) if t else np.zeros(0) for t in range(len(scores))]
    return Trace.from_rows("random", rows, kvzip_scores=scores)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("budget", "window"), [(8, 0), (8, 3), (16, 8), (5, 4)])
def test_the_policy_evicts_as_the_literal_rule_does(seed, budget, window):
    rng = np.random.default_rng(seed)
    scores = rng.beta(0.5, 3.0, 120)
    if seed % 2:
        scores = np.round(scores, 1)  # equal scores: the lower position goes first
    rep = replay(KVzip(budget, window), _trace(scores))
    want = literal(scores, 120, budget, window)
    for t in range(120):
        assert [p for p, _ in rep.victims_at(t)] == want[t], t


def test_with_no_window_it_keeps_what_kvzip_keeps_of_one_head():
    scores = np.random.default_rng(9).permutation(np.linspace(0.01, 0.9, 200))  # distinct
    rep = replay(KVzip(32, 0), _trace(scores))
    held, _ = rep.kept_at(199)
    kept = np.setdiff1d(held, [p for p, _ in rep.victims_at(199)])
    want = kvzip_keep(scores.astype(np.float32).astype(np.float64)[None, None], 32)[0][0]
    np.testing.assert_array_equal(np.sort(kept), want)


def test_refused_without_scores_and_said_to_know_the_text_ahead():
    with pytest.raises(ValueError, match="KVzip reads each position's kvzip_scores"):
        replay(KVzip(64), canonical_trace())
    p = KVzip(4, 1)
    with pytest.raises(ValueError, match="repeats the text and has no kvzip_scores: give"):
        p.on_decode_step(0, None)
    assert len(p) == 0 and p.last_pos == -1
    with pytest.raises(ValueError, match="finite, non-negative"):
        KVzip(4, 1, kvzip_scores=[0.5, -1.0])
    assert POLICIES["kvzip"] is KVzip and not KVzip.reads_attention
    assert "whole text" in KVzip.hindsight and "not yet read" in KVzip.hindsight


def test_shipped_traces_carry_the_scores_the_model_computes():
    """The sinks score 1 (KVzip's rule); every score is a softmax weight; and the model's row
    ``kvzip@B`` stays the one-shot press."""
    for path in sorted((ROOT / "traces").glob("*.npz")):
        trace = load_trace(path)
        s = trace.kvzip_scores
        assert s is not None and s.shape == (trace.steps,)
        assert (s[:4] == 1.0).all() and (s >= 0).all() and (s <= 1.0).all()
        assert replay(KVzip(128), trace, record=False).summary()["evictions"] == trace.steps - 128
    assert type(Row.parse("kvzip@128").cache).__name__ == "KvzipCache"


@pytest.mark.slow
def test_tables_that_rank_it_say_what_it_knows_ahead(capsys):
    from h2o.analysis import hindsight_notes
    from h2o.cli import main

    assert hindsight_notes(["h2o", "kvzip", "kvzip", "tova"]) == [f"{KVzip.hindsight}."]
    assert hindsight_notes(["h2o", "key-norm"]) == []
    main(["bench", "--trace", str(ROOT / "traces" / "library-L8-mean.npz"), "--budget", "128"])
    assert f"note: {KVzip.hindsight}." in capsys.readouterr().out
