"""Expected Attention stepped as the model decodes (h2o/policies/expected_attention.py) against a
literal transcription of its rule — kvpress's ExpectedAttentionPress score (statistics of the
queries before RoPE, the rotation averaged in kvpress's own ``rotate_half`` layout, softmax over
the keys, group mean, times ‖v‖, sinks at max + 1), applied at every step to the keys kept
(``rescore_every=1``; the interval: test_expected_attention_interval.py), with the card's
protected window and argmin eviction — on random vectors and on a shipped trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from h2o import load_trace
from h2o.model.caches.expected_attention_cache import QueryStats, expected_attention_scores
from h2o.policies import POLICIES, make_policy
from h2o.policies.expected_attention import ExpectedAttention
from h2o.replay import replay, replay_stepwise
from h2o.synthetic import canonical_trace
from h2o.trace import Trace
from h2o.trace_vectors import HeadVectors

ROOT = Path(__file__).resolve().parents[1]
N_FUTURE, N_SINK = 512, 4  # kvpress's defaults, restated


def halves(x: np.ndarray) -> np.ndarray:
    """Adjacent rotary pairs (ours) to rotate_half's halves (kvpress's): 2i -> i, 2i+1 -> i+d/2."""
    d = x.shape[-1]
    return np.concatenate([x[..., 0:d:2], x[..., 1:d:2]], axis=-1)


def literal_step_scores(vec: HeadVectors, kept: list[int], pos: int) -> list[float]:
    """The rule at step ``pos`` over the ``kept`` positions, in rotate_half's layout, float64."""
    q = halves(vec.queries.astype(np.float64))
    k = halves(vec.keys.astype(np.float64))
    H, G, d = q.shape[1], k.shape[1], q.shape[2]
    gs = H // G
    sinks = [j for j in kept if j < N_SINK]
    rest = [j for j in kept if j >= N_SINK]
    if pos < N_SINK:
        return [1.0] * len(kept)
    h = q[N_SINK : pos + 1].transpose(1, 0, 2)  # (H, n, d): the queries read, sinks left out
    mu = h.mean(axis=1, keepdims=True)
    c = h - mu
    cov = np.einsum("nsi,nsj->nij", c, c) / h.shape[1]
    mu = mu[:, 0]
    inv_freq = vec.rope_base ** (-np.arange(0, d, 2) / d)
    ang = np.outer(np.arange(pos + 1, pos + 1 + N_FUTURE), inv_freq)
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=1)
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=1)
    Id, P = np.eye(d), np.zeros((d, d))
    P[d // 2 :, : d // 2], P[: d // 2, d // 2 :] = np.eye(d // 2), -np.eye(d // 2)
    R = (cos[:, :, None] * Id + sin[:, :, None] * P).mean(axis=0)
    mu, cov = mu @ R.T, R @ cov @ R.T
    per_kv = []
    for g in range(G):
        kk = k[rest, g]
        total = np.zeros(len(rest))
        for hh in range(g * gs, (g + 1) * gs):
            s = kk @ mu[hh] / np.sqrt(d) + np.einsum("nd,de,ne->n", kk, cov[hh], kk) / d / 2
            e = np.exp(s - s.max())
            total += e / e.sum() / gs
        per_kv.append(total * vec.value_norms[rest, g])
    score = dict(zip(rest, np.mean(per_kv, axis=0), strict=True))
    top = max(score.values())
    return [score[j] if j in score else top + 1.0 for j in kept] if sinks else list(score.values())


def literal_replay(vec: HeadVectors, steps: int, budget: int, window: int):
    """Admit, rescore, then drop the lowest score outside the last ``window`` (ties: the lower
    position) while over budget. Returns each step's kept positions and scores before its
    eviction (what a replay records)."""
    kept: list[int] = []
    out = []
    for pos in range(steps):
        kept.append(pos)
        score = literal_step_scores(vec, kept, pos)
        out.append((list(kept), list(score)))
        while len(kept) > budget:
            cand = range(len(kept) - window)
            i = min(cand, key=lambda i: (score[i], kept[i]))
            del kept[i], score[i]
    return out


def random_vectors(T: int, H: int, G: int, d: int, seed: int) -> HeadVectors:
    rng = np.random.default_rng(seed)
    return HeadVectors(
        rng.normal(size=(T, H, d)) * 2,
        rng.normal(size=(T, G, d)),
        rng.gamma(2.0, 1.0, (T, G)),
        float(rng.choice([10000.0, 100000.0])),
    )


def random_trace(vec: HeadVectors, seed: int) -> Trace:
    T = vec.positions
    dense = np.tril(np.random.default_rng(seed).random((T, T)) + 1e-3, -1)
    return Trace.from_dense("random", dense, normalize=True, vectors=vec)


@pytest.mark.parametrize(
    ("H", "G", "budget", "window", "seed"),
    [(4, 2, 12, 3, 0), (3, 1, 9, 0, 1), (2, 2, 20, 5, 2), (6, 3, 7, 6, 3), (1, 1, 16, 2, 4)],
)
def test_replay_matches_the_literal_rule_step_by_step(H, G, budget, window, seed) -> None:
    vec = random_vectors(60, H, G, 8, seed)
    trace = random_trace(vec, seed)
    run = replay(ExpectedAttention(budget, window, rescore_every=1), trace)
    for t, (kept, score) in enumerate(literal_replay(vec, 60, budget, window)):
        n = int(run.n_kept[t])
        assert run.kept_pos[t, :n].tolist() == kept, f"step {t}"
        np.testing.assert_allclose(run.kept_score[t, :n], score, rtol=1e-9, err_msg=f"step {t}")


def test_once_after_the_prompt_it_is_the_models_one_shot_score() -> None:
    """With every position kept, a step's scores are the model's one-shot Expected Attention
    scores of that prefix (mean over the KV heads). The two share the score's formula, so this
    checks the plumbing around it — the query statistics the model gathers as it reads (before
    RoPE, sinks left out) against the policy's running sums, and the averaged rotation's start;
    the formula itself is checked against kvpress's transcription above."""
    vec = random_vectors(50, 4, 2, 8, 7)
    p = ExpectedAttention(64, 0, vectors=vec)
    for t in range(50):
        p.on_decode_step(t, None)
    from h2o.model.forward import apply_rope, rope_tables

    class Cfg:  # what QueryStats reads of the model's config
        n_layers, n_heads, head_dim, rope_base = 1, 4, 8, vec.rope_base

    stats = QueryStats(Cfg, 50)
    cos, sin = rope_tables(np.arange(50), 8, vec.rope_base)
    rotated = apply_rope(vec.queries.transpose(1, 0, 2).astype(np.float64), cos, sin) / np.sqrt(8)

    class Chunk:  # an attention hook's chunk: the queries rotated and scaled, as the model's
        layer, start, rows, queries = 0, 0, 50, rotated

    stats.hook(Chunk)
    mu, cov = stats.rotated(0)
    want = np.mean(
        [
            expected_attention_scores(
                vec.keys[:, g],
                np.c_[vec.value_norms[:, g]],
                mu[2 * g : 2 * g + 2],
                cov[2 * g : 2 * g + 2],
            )
            for g in range(2)
        ],
        axis=0,
    )
    got = p.scores.copy()
    got[:N_SINK] = want[:N_SINK]  # sinks: max + 1 of each head's scores vs of their mean
    np.testing.assert_allclose(got, want, rtol=1e-5)
    assert (p.scores[:N_SINK] == p.scores[N_SINK:].max() + 1).all()


def test_on_a_shipped_trace_it_reads_the_captured_vectors() -> None:
    trace = load_trace(ROOT / "traces" / "lighthouse-L8-mean.npz")
    assert ExpectedAttention.runs_on(trace) and trace.vectors.queries.shape == (1024, 9, 64)
    run = replay(make_policy("expected-attention", 128), trace)
    assert run.n_kept.max() == 129 and np.isfinite(run.kept_score[run.kept_pos >= 0]).all()
    # the first steps of the literal rule, on the real vectors
    head = HeadVectors(
        trace.vectors.queries[:40],
        trace.vectors.keys[:40],
        trace.vectors.value_norms[:40],
        trace.vectors.rope_base,
    )
    small = replay_stepwise(ExpectedAttention(24, 8, rescore_every=1), _prefix(trace, 40))
    for t, (kept, score) in enumerate(literal_replay(head, 40, 24, 8)):
        n = int(small.n_kept[t])
        assert small.kept_pos[t, :n].tolist() == kept
        np.testing.assert_allclose(small.kept_score[t, :n], score, rtol=1e-7)
        if t > 30:
            break


def _prefix(trace: Trace, steps: int) -> Trace:
    v = trace.vectors
    return Trace.from_dense(
        "prefix",
        _dense(trace, steps),
        normalize=True,
        vectors=HeadVectors(v.queries[:steps], v.keys[:steps], v.value_norms[:steps], v.rope_base),
    )


def _dense(trace: Trace, steps: int) -> np.ndarray:
    out = np.zeros((steps, steps))
    for t in range(1, steps):
        out[t, :t] = trace.row(t)
    return out


def test_refused_without_vectors_and_nothing_changes() -> None:
    p = ExpectedAttention(8, 2)
    with pytest.raises(ValueError, match="queries, keys and value norms"):
        p.on_decode_step(0, None)
    assert len(p) == 0 and p.last_pos == -1
    short = ExpectedAttention(8, 2, vectors=random_vectors(3, 1, 1, 4, 0))
    for t in range(3):
        short.on_decode_step(t, None)
    with pytest.raises(ValueError, match="vectors for 3 positions"):
        short.on_decode_step(3, None)
    assert short.kept.tolist() == [0, 1, 2]
    synthetic = canonical_trace()
    assert not ExpectedAttention.runs_on(synthetic)
    with pytest.raises(ValueError, match="vectors"):
        replay(ExpectedAttention(8, 2), synthetic)


def test_a_trace_that_would_take_too_long_is_refused_before_any_step() -> None:
    from h2o.policies.expected_attention import MAX_WORK

    vec = HeadVectors(np.zeros((600, 16, 256)), np.zeros((600, 1, 256)), np.ones((600, 1)), 1e4)
    assert MAX_WORK < 16 * 256**2 * 600 * 1025
    with pytest.raises(ValueError, match=r"multiply-adds on this trace.*Lower the budget"):
        ExpectedAttention(1024, 8, vectors=vec)
    assert MAX_WORK > 9 * 64**2 * 1024 * 1024  # a shipped trace at any budget it offers


def test_registered_reads_no_attention_and_refused_by_the_model() -> None:
    cls = POLICIES["expected-attention"]
    assert cls is ExpectedAttention and not cls.reads_attention
    assert cls.reads_trace == ("vectors",) and cls.compiled_rule() is None
