"""Expected Attention (h2o/model/caches/expected_attention_cache.py) against a literal
transcription of kvpress's ExpectedAttentionPress — the query statistics before RoPE
(``get_query_statistics``), the averaged rotation in kvpress's own ``rotate_half`` layout
(``apply_avg_rope``), the score (``score``) and the choice (``ScorerPress.compress``: the top
scores of each head) — on random inputs and as a row on the tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from h2o.model.caches.expected_attention_cache import (
    N_FUTURE,
    N_SINK,
    ExpectedAttentionCache,
    QueryStats,
    averaged_rope,
    expected_attention_scores,
    top_keep,
)
from h2o.model.forward import AttnChunk, apply_rope, rope_tables
from h2o.model.rows import Row


def halves(x: np.ndarray) -> np.ndarray:
    """Adjacent rotary pairs (GGUF's layout, ours) to rotate_half's halves (kvpress's, HF's):
    dimension 2i goes to i, 2i + 1 to i + d/2."""
    d = x.shape[-1]
    return np.concatenate([x[..., 0:d:2], x[..., 1:d:2]], axis=-1)


def literal_scores(pre_q, keys, values, q_len, rope_base, gs, n_future=N_FUTURE, n_sink=N_SINK):
    """kvpress's ExpectedAttentionPress.score, transcribed in numpy float64, in rotate_half's
    layout. ``pre_q`` (H, q_len, d): the queries before RoPE of every context position;
    ``keys``/``values`` (G, q_len, d) as cached (keys rotated)."""
    q, k, v = halves(pre_q), halves(keys), values
    d = q.shape[-1]
    # get_query_statistics: drop the first n_sink hidden states, mean, covariance / len
    h = q[:, n_sink:]
    mu = h.mean(axis=1, keepdims=True)
    c = h - mu
    cov = np.einsum("nsi,nsj->nij", c, c) / h.shape[1]
    mu = mu[:, 0]
    # apply_avg_rope: R = cos*Id + sin*P over positions q_len .. q_len + n_future - 1, averaged
    inv_freq = rope_base ** (-np.arange(0, d, 2) / d)
    ang = np.outer(np.arange(q_len, q_len + n_future), inv_freq)
    cos = np.concatenate([np.cos(ang), np.cos(ang)], axis=1)  # HF's cos: (n, d), halves repeated
    sin = np.concatenate([np.sin(ang), np.sin(ang)], axis=1)
    Id, P = np.eye(d), np.zeros((d, d))
    P[d // 2 :, : d // 2], P[: d // 2, d // 2 :] = np.eye(d // 2), -np.eye(d // 2)
    R = (cos[:, :, None] * Id + sin[:, :, None] * P).mean(axis=0)
    mu, cov = mu @ R.T, R @ cov @ R.T
    # score: sinks removed, keys repeated per query head, softmax, group mean, times ||v||
    kk = np.repeat(k[:, n_sink:], gs, axis=0)  # repeat_kv
    s = np.einsum("hd,hnd->hn", mu, kk) / np.sqrt(d)
    s += np.einsum("hnd,hde,hne->hn", kk, cov, kk) / d / 2
    s = np.exp(s - s.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    s = s.reshape(-1, gs, s.shape[1]).mean(axis=1)
    s = s * np.linalg.norm(v[:, n_sink:], axis=-1)
    return np.concatenate([np.full((s.shape[0], n_sink), s.max() + 1), s], axis=1)


def literal_keep(score: list[float], n_keep: int) -> list[int]:
    """ScorerPress.compress for one head: ``scores.topk(n_kept)`` (equal scores: the higher
    position), the kept positions in order."""
    ranked = sorted(range(len(score)), key=lambda j: (-score[j], -j))
    return sorted(ranked[:n_keep])


def ours(pre_q, keys, values, rope_base, gs):
    """The module's path: the statistics gathered from hook chunks of rotated, scaled queries."""
    H, C, d = pre_q.shape
    cfg = type("Cfg", (), {"n_layers": 1, "n_heads": H, "head_dim": d, "rope_base": rope_base})()
    stats = QueryStats(cfg, C)
    cos, sin = rope_tables(np.arange(C), d, rope_base)
    q = apply_rope(pre_q.astype(np.float32), cos, sin) / np.float32(np.sqrt(d))
    for a in range(0, C, 7):  # in chunks, as the model hands them
        rows = q[:, a : a + 7]
        blank = np.zeros((H, rows.shape[1], a + rows.shape[1]))
        stats.hook(AttnChunk(0, a, blank, blank, rows))
    mu, cov = stats.rotated(0)
    return np.stack(
        [
            expected_attention_scores(
                keys[g], values[g], mu[g * gs : (g + 1) * gs], cov[g * gs : (g + 1) * gs]
            )
            for g in range(keys.shape[0])
        ]
    )


@pytest.mark.parametrize("seed", range(6))
def test_scores_are_the_literal_rule(seed) -> None:
    rng = np.random.default_rng(seed)
    G, gs, d = int(rng.integers(1, 4)), int(rng.integers(1, 4)), 8
    C = int(rng.integers(N_SINK + 3, 60))
    pre_q = rng.normal(size=(G * gs, C, d)) + rng.normal(size=(G * gs, 1, d))
    keys = rng.normal(size=(G, C, d)).astype(np.float32)
    values = rng.normal(size=(G, C, d)).astype(np.float32)
    base = 10000.0 if seed % 2 else 100.0
    got = ours(pre_q, keys, values, base, gs)
    want = literal_scores(pre_q, keys.astype(np.float64), values.astype(np.float64), C, base, gs)
    # the sinks' padding is the maximum over every head in kvpress, per head here: both keep them
    assert np.allclose(got[:, N_SINK:], want[:, N_SINK:], rtol=1e-4, atol=1e-9)
    n_keep = int(rng.integers(1, C))
    for g in range(G):
        assert (got[g, :N_SINK] > got[g, N_SINK:].max()).all()
        assert top_keep(got[g], n_keep).tolist() == literal_keep(want[g].tolist(), n_keep)


def test_the_averaged_rotation_is_the_mean_of_the_models_rotations() -> None:
    d, base, first = 8, 500.0, 37
    x = np.random.default_rng(0).normal(size=(d,))
    cos, sin = rope_tables(np.arange(first, first + N_FUTURE), d, base)
    each = apply_rope(np.tile(x, (N_FUTURE, 1)).astype(np.float64), cos, sin)
    assert np.allclose(averaged_rope(d, base, first) @ x, each.mean(axis=0), atol=1e-6)


def test_a_key_the_next_queries_point_at_is_kept_however_old() -> None:
    # the queries all point along one direction; an early key along it beats recent ones (the
    # last rotary pair, which a large base barely turns over 512 positions: the first pair
    # turns by a radian a position, whatever the base)
    d, C = 8, 40
    rng = np.random.default_rng(3)
    pre_q = np.tile(np.eye(d)[d - 2] * 4.0, (1, C, 1)) + 0.01 * rng.normal(size=(1, C, d))
    keys = 0.1 * rng.normal(size=(1, C, d)).astype(np.float32)
    keys[0, 6] = np.eye(d)[d - 2] * 3.0  # position 6
    values = np.ones((1, C, d), dtype=np.float32)
    score = ours(pre_q, keys, values, 1e9, 1)[0]
    assert top_keep(score, N_SINK + 1).tolist() == [0, 1, 2, 3, 6]


def test_equal_scores_keep_the_higher_position() -> None:
    assert top_keep(np.ones(10), 3).tolist() == [7, 8, 9]


@pytest.mark.parametrize(
    ("label", "match"),
    [
        ("expected-attention@32", "must exceed the 32"),
        ("expected-attention@128/pyramid", "no allocation"),
        ("expected-attention@128:w8", "takes no options"),
        ("expected-attention@128+kivi4", "takes no bits"),
    ],
)
def test_refusals(label, match) -> None:
    with pytest.raises(ValueError, match=match):
        Row.parse(label)


def test_the_row() -> None:
    row = Row.parse("expected-attention@128")
    assert type(row.cache) is ExpectedAttentionCache and row.label == "expected-attention@128"
    assert row.family == "Expected Attention" and row.group == "evict"
    assert row.cache.closed_loop and row.cache.prompt_limit(500) == 0


def test_on_the_model_it_keeps_what_the_literal_rule_keeps(tiny_smollm) -> None:
    from tiny_model import token_ids

    from h2o.model import KVCache
    from h2o.model.answer import kept_sets, read_prompt, score_answer
    from h2o.model.forward import rms_norm

    model = tiny_smollm
    cfg = model.config
    ids = token_ids(150, seed=5)
    prompt, answer = ids[:140], ids[140:145]
    T, C, budget = len(prompt), len(prompt) - 32, 64
    cache = KVCache(cfg, T)
    _, policies = read_prompt(model, prompt, Row.parse(f"expected-attention@{budget}"), cache, None)
    kept = kept_sets(policies)
    full = KVCache(cfg, T)
    model.read(prompt[:C], full)  # the context under full attention, as kvpress prefills it
    x = model.tok_embd[np.asarray(prompt[:C])].astype(np.float32)
    checked = 0
    for li in range(cfg.n_layers):
        if li:  # the residual stream entering layer li, by an independent forward
            x = model.forward(prompt[:C], stop_after_layer=li - 1)
        lw = model.layers[li]
        pre_q = (rms_norm(x, lw.attn_norm, cfg.rms_eps) @ lw.wq.T).reshape(C, cfg.n_heads, -1)
        want = literal_scores(
            pre_q.transpose(1, 0, 2).astype(np.float64),
            full.k[li, :, :C].astype(np.float64),
            full.v[li, :, :C].astype(np.float64),
            C,
            cfg.rope_base,
            cfg.group_size,
        )
        for g in range(cfg.n_kv_heads):
            ranked = np.sort(want[g])[::-1]
            n = budget - 32
            if ranked[n - 1] - ranked[n] < 1e-4 * ranked[n - 1]:
                continue  # a near tie at the cut: the two paths' rounding may order it either way
            assert kept[li][g].tolist() == literal_keep(want[g].tolist(), n) + list(range(C, T))
            checked += 1
    assert checked >= cfg.n_layers * cfg.n_kv_heads // 2
    # a budget the prompt fits in is the full cache, to the last digit
    whole = score_answer(model, prompt, answer, Row.parse("expected-attention@200"), max_new=2)
    ref = score_answer(model, prompt, answer, Row("full"), max_new=2)
    assert whole.token_logprobs == ref.token_logprobs and whole.produced_ids == ref.produced_ids
