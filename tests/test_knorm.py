"""K-norm (h2o/model/caches/knorm.py) against a literal transcription of its rule — the paper's
"keep the keys with the lowest L2 norm" as kvpress's KnormPress scores it (``-keys.norm(dim=-1)``,
then the top scores kept) — on random keys, and as a row on the tiny model."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from h2o.model.caches.knorm import WINDOW, Knorm, knorm_keep
from h2o.model.rows import Row


def literal_knorm(keys: list[list[float]], budget: int, window: int) -> list[int]:
    """One head, in plain Python: every position if the prompt fits; else the context's
    ``budget - window`` lowest key norms (equal norms: the higher position) and the last
    ``window`` prompt tokens (the question, which kvpress reads after compressing)."""
    T = len(keys)
    if budget >= T:
        return list(range(T))
    context = T - window
    norms = [math.sqrt(sum(x * x for x in keys[j])) for j in range(context)]
    ranked = sorted(range(context), key=lambda j: (norms[j], -j))
    return sorted(ranked[: budget - window] + list(range(context, T)))


@pytest.mark.parametrize("seed", range(12))
def test_keep_is_the_literal_rule(seed) -> None:
    rng = np.random.default_rng(seed)
    T = int(rng.integers(5, 120))
    window = int(rng.integers(1, 8))
    budget = int(rng.integers(window + 1, T + 10))
    keys = rng.normal(size=(T, 8)).astype(np.float32)
    if seed % 3 == 0:  # ties: repeated keys
        keys[rng.integers(0, T, size=T // 2)] = keys[0]
    got = knorm_keep(keys, budget, window)
    assert got.tolist() == literal_knorm(keys.astype(np.float64).tolist(), budget, window)
    assert len(got) == min(budget, T)


def test_equal_norms_keep_the_higher_position() -> None:
    keys = np.ones((10, 4))  # every norm equal
    assert knorm_keep(keys, budget=5, window=2).tolist() == [5, 6, 7, 8, 9]


def test_a_small_norm_is_kept_however_old() -> None:
    keys = np.full((50, 4), 3.0)
    keys[3] = 0.1  # the smallest norm, far from the end
    assert 3 in knorm_keep(keys, budget=WINDOW + 1, window=WINDOW).tolist()


@pytest.mark.parametrize(
    ("label", "match"),
    [
        ("knorm@32", "must exceed the 32"),
        ("knorm@128/pyramid", "no allocation"),
        ("knorm@128:w8", "knorm takes no options"),
        ("knorm@0", "positive integer"),
    ],
)
def test_refusals(label, match) -> None:
    with pytest.raises(ValueError, match=match):
        Row.parse(label)


def test_the_row() -> None:
    row = Row.parse("knorm@128")
    assert type(row.cache) is Knorm and row.label == "knorm@128"
    assert row.family == "K-norm" and row.group == "evict" and not row.cache.closed_loop
    assert Row.parse("knorm@128+kivi4").group == "both"


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory):
    pytest.importorskip("gguf")
    pytest.importorskip("tokenizers")
    from tiny_model import write_tiny_gguf

    from h2o.model import SmolLM

    path: Path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path)
    return SmolLM.load(path)


def test_on_the_model_each_head_keeps_the_literal_choice(model) -> None:
    from tiny_model import token_ids

    from h2o.model import KVCache
    from h2o.model.answer import kept_sets, read_prompt, score_answer

    ids = token_ids(150, seed=4)
    prompt, answer = ids[:140], ids[140:145]
    row = Row.parse("knorm@60")
    cache = KVCache(model.config, len(prompt))
    _, policies = read_prompt(model, prompt, row, cache, None)
    kept = kept_sets(policies)
    full = KVCache(model.config, len(prompt))
    model.read(prompt, full)  # the prompt's keys under full attention, as kvpress reads them
    for li in range(model.config.n_layers):
        for g in range(model.config.n_kv_heads):
            keys = full.k[li, g, : len(prompt)].astype(np.float64).tolist()
            assert kept[li][g].tolist() == literal_knorm(keys, 60, WINDOW)
    # the last 32 prompt tokens (the question) are kept by every head
    assert all(set(range(108, 140)) <= set(k.tolist()) for heads in kept for k in heads)
    # a budget the prompt fits in is the full cache, to the last digit
    whole = score_answer(model, prompt, answer, Row.parse("knorm@200"), max_new=2)
    ref = score_answer(model, prompt, answer, Row("full"), max_new=2)
    assert whole.token_logprobs == ref.token_logprobs
    assert whole.produced_ids == ref.produced_ids
