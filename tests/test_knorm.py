"""K-norm (h2o/model/caches/knorm_cache.py) against a literal transcription of its rule — the
paper's "keep the keys with the lowest L2 norm" as kvpress's KnormPress scores it
(``-keys.norm(dim=-1)``, then the top scores kept) — on random keys, and as a row on the tiny
model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from h2o.model.caches.knorm_cache import KnormCache, knorm_keep
from h2o.model.rows import Row


def literal_knorm(keys: list[list[float]], n_keep: int) -> list[int]:
    """One head's context, in plain Python: kvpress's ``scores = -keys.norm(dim=-1)`` and
    ``scores.topk(n_kept)`` — the ``n_keep`` lowest key norms (equal norms: the higher position),
    every position if there are no more."""
    C = len(keys)
    if n_keep >= C:
        return list(range(C))
    norms = [math.sqrt(sum(x * x for x in keys[j])) for j in range(C)]
    ranked = sorted(range(C), key=lambda j: (norms[j], -j))
    return sorted(ranked[:n_keep])


@pytest.mark.parametrize("seed", range(12))
def test_keep_is_the_literal_rule(seed) -> None:
    rng = np.random.default_rng(seed)
    C = int(rng.integers(5, 120))
    n_keep = int(rng.integers(1, C + 10))
    keys = rng.normal(size=(C, 8)).astype(np.float32)
    if seed % 3 == 0:  # ties: repeated keys
        keys[rng.integers(0, C, size=C // 2)] = keys[0]
    got = knorm_keep(keys, n_keep)
    assert got.tolist() == literal_knorm(keys.astype(np.float64).tolist(), n_keep)
    assert len(got) == min(n_keep, C)


def test_equal_norms_keep_the_higher_position() -> None:
    assert knorm_keep(np.ones((10, 4)), 3).tolist() == [7, 8, 9]  # every norm equal


def test_a_small_norm_is_kept_however_old() -> None:
    keys = np.full((50, 4), 3.0)
    keys[3] = 0.1  # the smallest norm, far from the end
    assert knorm_keep(keys, 1).tolist() == [3]


@pytest.mark.parametrize(
    ("label", "match"),
    [
        ("knorm@32", "must exceed the 32"),
        ("knorm@128/pyramid", "no allocation"),
        ("knorm@128:w8", "knorm takes no options"),
        ("knorm@0", "positive integer"),
        ("knorm@128+kivi4", "takes no bits"),
    ],
)
def test_refusals(label, match) -> None:
    with pytest.raises(ValueError, match=match):
        Row.parse(label)


def test_the_row() -> None:
    row = Row.parse("knorm@128")
    assert type(row.cache) is KnormCache and row.label == "knorm@128"
    assert row.family == "K-norm" and row.group == "evict" and row.cache.closed_loop
    assert row.cache.window == 32


@pytest.fixture(scope="module")
def model(tiny_smollm):
    return tiny_smollm


@pytest.mark.parametrize("question", [None, 30, 34])
def test_on_the_model_the_context_is_compressed_then_the_question_read(model, question) -> None:
    """The prompt's last ``question`` tokens (32 when none is named) are the question, read
    after the context is compressed to the budget less them, as kvpress separates the two."""
    from tiny_model import token_ids

    from h2o.model import KVCache
    from h2o.model.answer import kept_sets, read_prompt, score_answer

    ids = token_ids(150, seed=4)
    prompt, answer = ids[:140], ids[140:145]
    q = 32 if question is None else question
    T, C = len(prompt), len(prompt) - q
    row = Row.parse("knorm@60")
    cache = KVCache(model.config, T)
    hidden, policies = read_prompt(model, prompt, row, cache, None, question=question)
    kept = kept_sets(policies)
    full = KVCache(model.config, T)
    model.read(prompt[:C], full)  # the context under full attention, as kvpress prefills it
    for li in range(model.config.n_layers):
        for g in range(model.config.n_kv_heads):
            keys = full.k[li, g, :C].astype(np.float64).tolist()
            assert kept[li][g].tolist() == literal_knorm(keys, 60 - q) + list(range(C, T))
    # the question was read through the compressed cache: its states differ from full attention
    model.read(prompt, full)
    assert not np.allclose(full.k[:, :, C:T], cache.k[:, :, C:T])
    assert hidden.shape[0] == q
    # a budget the prompt fits in is the full cache, to the last digit
    whole = score_answer(model, prompt, answer, Row.parse("knorm@200"), max_new=2)
    ref = score_answer(model, prompt, answer, Row("full"), max_new=2)
    assert whole.token_logprobs == ref.token_logprobs
    assert whole.produced_ids == ref.produced_ids


def test_what_a_fused_kernel_rules_out_is_h2os_sum_only():
    """A fused attention kernel never writes the weights out: that rules out H2O, which adds up
    every weight of every step, but not SnapKV or TOVA, which recompute the few queries' weights
    they read (kvpress's ``compute_window_attention``; SnapKV's code with FlashAttention-2)."""
    said = KnormCache.since_h2o
    cannot = said[said.index("cannot") - 80 : said.index("cannot")]
    assert "H2O" in cannot
    assert "SnapKV" not in cannot.split("(")[0] and "TOVA" not in cannot.split("(")[0]
    assert "SnapKV and TOVA recompute" in said


@pytest.mark.parametrize("needle_id", ["red-safe", "black-box"])
def test_the_grid_hands_each_prompt_its_own_question(tiny_path, monkeypatch, needle_id) -> None:
    """A needle cell's question is its prompt's tail (the question and the assistant's first
    words), whatever its length in tokens: the grid names it, and the compressed-context row
    compresses exactly the tokens before it."""
    from h2o.model import SmolLM
    from h2o.model.caches.base import ContextCompression
    from h2o.needle.cells import run_cells
    from h2o.needle.haystack import build_prompt, tail
    from h2o.needle.needles import needle

    model = SmolLM.load(tiny_path)
    nd = needle(needle_id)
    p = build_prompt(model.encode, nd, 512, 50)
    assert p.question_tokens == len(model.encode(tail(nd)))
    assert model.decode(p.ids[-p.question_tokens :]) == tail(nd)
    seen: list[int | None] = []
    real = ContextCompression.read_prompt

    def spy(self, model, prompt, cache, quant, reading, calibration_ids=None):
        seen.append(reading.question)
        return real(self, model, prompt, cache, quant, reading, calibration_ids)

    monkeypatch.setattr(ContextCompression, "read_prompt", spy)
    spec = {"row": "knorm@128", "length": 512, "depth": 50, "needle": needle_id, "max_new": 2}
    run_cells([spec], load=lambda: model)
    assert seen == [p.question_tokens]
