"""KVzip (h2o/model/caches/kvzip_cache.py) against a literal transcription of kvpress's KVzipPress:
the score (``score_kvzip``: a softmax over the sinks, the chunk and the repeat, its max over the
repeat's queries and the KV head's query heads) and the choice (``compress_post``: the lowest
scores pruned over every layer and head at once), on random inputs and on the tiny model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from h2o.model.caches.kvzip_cache import (
    N_SINK,
    REPEAT,
    SUFFIX,
    KvzipCache,
    kvzip_keep,
    reconstruction_scores,
    repeat_chunks,
)
from h2o.model.rows import Row


def literal_keep(score: list, n_keep: int) -> list:
    """kvpress's compress_post (layerwise=False) in plain Python: prune the lowest scores over
    all layers and heads at once; here, keep the rest — the L * G * n_keep highest (equal
    scores: the higher position kept)."""
    L, G, C = len(score), len(score[0]), len(score[0][0])
    if n_keep >= C:
        return [[list(range(C)) for _ in range(G)] for _ in range(L)]
    entries = [(score[li][g][j], j, li, g) for li in range(L) for g in range(G) for j in range(C)]
    entries.sort(key=lambda e: (-e[0], -e[1], e[2], e[3]))
    kept = [[[] for _ in range(G)] for _ in range(L)]
    for _, j, li, g in entries[: L * G * n_keep]:
        kept[li][g].append(j)
    return [[sorted(k) for k in row] for row in kept]


@pytest.mark.parametrize("seed", range(8))
def test_keep_is_the_literal_rule(seed) -> None:
    rng = np.random.default_rng(seed)
    L, G = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    C = int(rng.integers(3, 80))
    n_keep = int(rng.integers(1, C + 5))
    score = rng.random((L, G, C))
    if seed % 2:
        score = np.round(score, 1)  # ties
    got = kvzip_keep(score, n_keep)
    assert [[k.tolist() for k in row] for row in got] == literal_keep(score.tolist(), n_keep)
    if n_keep < C:  # the same total as n_keep a head, unevenly spread
        assert sum(len(k) for row in got for k in row) == L * G * n_keep


def test_the_repeat_prompts() -> None:
    def enc(text: str) -> list[int]:
        return [ord(c) for c in text]

    ctx = list(range(5000))
    chunks = repeat_chunks(enc, ctx)
    assert [(a, b) for a, b, _ in chunks] == [(0, 2048), (2048, 4096), (4096, 5000)]
    assert chunks[0][2] == enc(REPEAT) + enc(SUFFIX) + ctx[:2048]
    second = chunks[1][2]
    assert second[-2048:] == ctx[2048:4096]
    assert second[: -2048 - len(SUFFIX)][-8:] == ctx[2040:2048]  # the last 8 of the chunk before


@pytest.mark.parametrize(
    ("label", "match"),
    [("kvzip@16", "must exceed"), ("kvzip@64/duo", "no allocation"), ("kvzip@64+kivi4", "no bits")],
)
def test_refusals(label, match) -> None:
    with pytest.raises(ValueError, match=match):
        Row.parse(label)


def test_the_row() -> None:
    row = Row.parse("kvzip@128")
    assert type(row.cache) is KvzipCache and row.label == "kvzip@128" and row.family == "KVzip"
    assert row.group == "evict" and row.cache.closed_loop


@pytest.fixture(scope="module")
def model(tiny_smollm):
    return tiny_smollm


@pytest.mark.slow
def test_the_score_is_the_literal_rule_on_the_model(model) -> None:
    """The repeat pass's logits, recorded here, give kvpress's score by a literal softmax over
    the sinks, the chunk and the repeat (one chunk: no sinks apart from it)."""
    from tiny_model import token_ids

    from h2o.model import KVCache

    cfg = model.config
    ids = token_ids(90, seed=2)
    C = len(ids) - 32
    cache = KVCache(cfg, len(ids))
    model.read(ids, cache)
    got = reconstruction_scores(model, ids, cache, C)
    ((_, _, repeat),) = repeat_chunks(model.encode, ids[:C])
    logits: dict[int, list] = {}
    work = KVCache(cfg, C + len(repeat))
    work.k[:, :, :C], work.v[:, :, :C], work.length = cache.k[:, :, :C], cache.v[:, :, :C], C

    def record(ch) -> None:
        for r in range(ch.rows):
            logits.setdefault(ch.layer, []).append(ch.scores[:, r, :].astype(np.float64).copy())

    model.read(ids[:C] + repeat, work, attn_hook=record)
    gs = cfg.group_size
    for li in range(cfg.n_layers):
        for g in range(cfg.n_kv_heads):
            for j in range(N_SINK, C, 7):
                best = 0.0
                for row in logits[li]:  # one repeat query
                    for h in range(g * gs, (g + 1) * gs):
                        keys = [t for t in range(row.shape[1]) if np.isfinite(row[h, t])]
                        z = sum(math.exp(row[h, t]) for t in keys)
                        best = max(best, math.exp(row[h, j]) / z)
                assert got[li, g, j] == pytest.approx(best, rel=1e-5, abs=1e-9)
    assert (got[:, :, :N_SINK] == 1.0).all()


def test_on_the_model_a_row_holds_its_total_and_reads_the_question_after(model) -> None:
    from tiny_model import token_ids

    from h2o.model.answer import kept_sets, read_prompt, score_answer
    from h2o.model.kv_cache import KVCache

    ids = token_ids(140, seed=9)
    prompt, answer = ids[:130], ids[130:134]
    T, C = len(prompt), len(prompt) - 32
    cfg = model.config
    row = Row.parse("kvzip@60")
    cache = KVCache(cfg, T)
    _, policies = read_prompt(model, prompt, row, cache, None)
    kept = kept_sets(policies)
    full = KVCache(cfg, T)
    model.read(prompt[:C], full)
    want = kvzip_keep(reconstruction_scores(model, prompt, full, C), 60 - 32)
    for li in range(cfg.n_layers):
        for g in range(cfg.n_kv_heads):
            assert kept[li][g].tolist() == want[li][g].tolist() + list(range(C, T))
    assert sum(len(k) for row_ in kept for k in row_) == cfg.n_layers * cfg.n_kv_heads * 60
    sc = score_answer(model, prompt, answer, row, needle_span=(100, 110), max_new=2)
    assert sc.kv_bytes == row.kv_bytes(cfg, len(prompt))  # the same total as 60 a head
    whole = score_answer(model, prompt, answer, Row.parse("kvzip@200"), max_new=2)
    ref = score_answer(model, prompt, answer, Row("full"), max_new=2)
    assert whole.token_logprobs == ref.token_logprobs
