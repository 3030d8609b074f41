"""The numpy SmolLM2 against the real SmolLM2-135M-Instruct GGUF (``-m model``).

Skipped, with the install hint, when the GGUF is not available. Kept short (< 1 minute): the
texts are a few hundred tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
from model_marks import INSTALL, have_model

from h2o.model import (
    SmolLM,
    generate,
    perplexity_under_eviction,
    policy_factory,
)

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(not have_model(), reason=f"SmolLM2 GGUF not installed: {INSTALL}"),
]

PARAGRAPH = (
    "The town library opens at nine in the morning and closes at six in the evening. On "
    "Saturdays it closes at noon, and on Sundays it is not open at all. Children can borrow up "
    "to five books at a time, and adults can borrow up to ten. Books must be returned within "
    "three weeks, but they can be renewed once by phone or online. If a book is returned late, "
    "there is a small fine for each day. The library also has computers that anyone can use for "
    "an hour a day, a quiet reading room on the second floor, and a story time for young "
    "children every Wednesday afternoon."
)


@pytest.fixture(scope="module")
def model() -> SmolLM:
    return SmolLM.load()


@pytest.fixture(scope="module")
def story_ids(model: SmolLM) -> list[int]:
    from pathlib import Path

    text = (Path(__file__).parents[1] / "traces" / "texts" / "library.txt").read_text("utf-8")
    return model.encode(text)[:320]


def test_config_matches_smollm2_135m(model: SmolLM) -> None:
    c = model.config
    assert (c.n_layers, c.d_model, c.d_ff, c.n_heads, c.n_kv_heads, c.head_dim) == (
        30,
        576,
        1536,
        9,
        3,
        64,
    )
    assert c.rope_base == 100000.0 and c.rms_eps == pytest.approx(1e-5)
    assert model.tok_embd.shape == (49152, 576) and not model.tok_embd.flags.writeable
    assert model.output is model.tok_embd  # tied output embedding


def test_tokenizer_round_trip(model: SmolLM) -> None:
    text = "In 2024, Zoë paid $3.50 for naïve café crêpes 🎉.\n<|im_start|>user\nhi<|im_end|>"
    ids = model.encode(text)
    assert model.decode(ids) == text
    assert model.encode("12345") == [model.encode(d)[0] for d in "12345"]  # digits split
    assert model.encode("<|im_start|>") == [1]
    assert model.tokenizer.token_strings(model.encode("The capital")) == ["The", " capital"]


def test_paragraph_perplexity_in_expected_range(model: SmolLM) -> None:
    ppl = model.perplexity(model.encode(PARAGRAPH))
    assert 10.0 < ppl < 20.0, ppl  # 14.2 measured (the feasibility prototype saw ~14.5)


def test_capital_of_france(model: SmolLM) -> None:
    res = generate(model, model.encode("The capital of France is"), max_new=2)
    assert res.text.startswith(" Paris"), res.text


def test_budget_at_least_T_equals_full_cache_exactly(model: SmolLM, story_ids) -> None:
    ids = story_ids[:200]
    full = perplexity_under_eviction(model, ids, None)
    r = perplexity_under_eviction(model, ids, policy_factory("h2o", 200))
    assert r.perplexity == full.perplexity
    np.testing.assert_array_equal(r.nll, full.nll)


def test_attention_sinks_beat_plain_sliding_window(model: SmolLM, story_ids) -> None:
    sinks = perplexity_under_eviction(model, story_ids, policy_factory("streaming-llm", 48))
    window = perplexity_under_eviction(model, story_ids, policy_factory("sliding-window", 48))
    full = perplexity_under_eviction(model, story_ids, None)
    assert full.perplexity < sinks.perplexity < window.perplexity
    assert window.perplexity > 1.5 * sinks.perplexity  # measured 57.4 vs 23.8 (full 23.2)
