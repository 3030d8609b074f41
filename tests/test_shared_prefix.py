"""A prompt read in fixed blocks, and prompts that share a prefix read from one state.

The needle grid's prompts of one length are one haystack up to their needles: ``score_cells``
reads what they share once and starts each prompt from the state at the last block they share.
What must hold, for every kind of row: the scores are the ones each prompt gets alone, bit for
bit (the log-probabilities, the greedy tokens, what is held, the bytes). Checked on the tiny
model (``tiny_model.py``) with prompts of several blocks, and on the real model where it is
installed.
"""

from __future__ import annotations

import numpy as np
import pytest
from model_marks import needs_model

from h2o.model.answer import (
    PromptState,
    prefix_states,
    read_prompt,
    score_answer,
    score_cells,
    shared_stop,
)
from h2o.model.forward import PROMPT_BLOCK
from h2o.model.kv_cache import KVCache
from h2o.model.rows import Row

#: Every way a row reads a prompt: the plain prefill (full cache; KIVI, which quantizes after
#: the prompt), the prompt read quantized, eviction while reading (a policy's state carried
#: over), under an allocation, H2O's prefill mode (the accumulated attention carried over),
#: SnapKV (its window after the shared part), and a combination.
ROWS = [
    "full",
    "kivi4",
    "kivi2:r32:qprompt",
    "h2o@48:w50%",
    "tova@48",
    "streaming-llm@48",
    "h2o@48/pyramid",
    "h2o@48:w50%:prefill",
    "snapkv@48",
    "snapkv@48:avg5",
    "h2o@48:w50%+kivi4",
]


def prompts(vocab: int, seed: int = 0) -> list[tuple[list[int], list[int], tuple[int, int]]]:
    """A haystack with a 'needle' at several places, as the grid builds them: the same tokens up
    to the needle, then the needle, the rest of the haystack and a question; one needle first."""
    rng = np.random.default_rng(seed)
    hay = [int(x) for x in rng.integers(3, vocab, size=420)]
    question = [int(x) for x in rng.integers(3, vocab, size=12)]
    out = []
    for j, at in enumerate((0, 100, 130, 200, 260, 300, 410)):
        needle = [int(x) for x in rng.integers(3, vocab, size=6 + j % 3)]
        ids = hay[:at] + needle + hay[at:] + question
        out.append((ids, [int(x) for x in rng.integers(3, vocab, size=3)], (at, at + len(needle))))
    return out


def same(a, b) -> None:
    assert a.token_logprobs == b.token_logprobs
    assert a.logprob == b.logprob
    assert a.produced_ids == b.produced_ids
    assert a.held == b.held
    assert a.kv_bytes == b.kv_bytes


# -- reading in blocks ---------------------------------------------------------------------------
def test_a_prompt_resumed_from_a_block_reads_as_the_whole(tiny_smollm):
    model = tiny_smollm
    ids = prompts(model.tok_embd.shape[0])[3][0]
    whole = KVCache(model.config, len(ids))
    h_whole = model.read(ids, whole)
    part = KVCache(model.config, len(ids))
    model.read(ids[: 2 * PROMPT_BLOCK], part)
    h_rest = model.read(ids, part)
    assert part.length == whole.length == len(ids)
    assert np.array_equal(part.k, whole.k) and np.array_equal(part.v, whole.v)
    assert np.array_equal(h_rest, h_whole[2 * PROMPT_BLOCK :])


def test_reading_is_one_forward_per_block_at_fixed_positions(tiny_smollm, monkeypatch):
    model = tiny_smollm
    ids = prompts(model.tok_embd.shape[0])[3][0]
    calls: list[tuple[int, int]] = []
    forward = type(model).forward

    def spy(self, chunk, *, cache=None, **kw):
        calls.append((cache.length, cache.length + len(chunk)))
        return forward(self, chunk, cache=cache, **kw)

    monkeypatch.setattr(type(model), "forward", spy)
    cache = KVCache(model.config, len(ids))
    cache_start = 100
    model.read(ids[:cache_start], cache)
    model.read(ids, cache)
    ends = [e for _, e in calls]
    assert calls[0] == (0, cache_start)
    assert calls[1] == (cache_start, PROMPT_BLOCK)  # a resumed read first ends its block
    assert all(e % PROMPT_BLOCK == 0 for e in ends[1:-1]) and ends[-1] == len(ids)


def test_reading_refuses_a_cache_with_nothing_left_to_read(tiny_smollm):
    model = tiny_smollm
    cache = KVCache(model.config, 8)
    model.read([5, 6, 7], cache)
    with pytest.raises(ValueError, match="nothing to read"):
        model.read([5, 6, 7], cache)


# -- where prompts meet --------------------------------------------------------------------------
def test_the_shared_stop_is_the_last_whole_block_of_the_common_prefix():
    row = Row.parse("h2o@48")
    a = list(range(300))
    b = list(range(260)) + [999] * 40
    assert shared_stop(a, b, row) == 2 * PROMPT_BLOCK  # 260 in common: blocks end at 128, 256
    assert shared_stop(a, a, row) == 2 * PROMPT_BLOCK  # a token of its own is left: 299 -> 256
    assert shared_stop(a[:256], a, row) == PROMPT_BLOCK  # not the whole prompt
    assert shared_stop([1, *a[1:]], a, row) == 0
    # SnapKV: not into its window (the last 32 tokens, which the compression reads)
    assert shared_stop(a, a, Row.parse("snapkv@48")) == 2 * PROMPT_BLOCK  # 300 - 32 >= 256
    assert shared_stop(a[:280], a, Row.parse("snapkv@48")) == PROMPT_BLOCK  # 280 - 32 < 256


def test_prefix_states_refuse_stops_off_the_blocks(tiny_smollm):
    row = Row.parse("full")
    ids = list(range(3, 300))
    for stops in ([100], [256, 128], [128, 128], [0], [384]):
        with pytest.raises(ValueError, match="stop"):
            list(prefix_states(tiny_smollm, ids, row, stops))


# -- the scores --------------------------------------------------------------------------------
@pytest.mark.parametrize("label", ROWS)
@pytest.mark.slow
def test_shared_cells_score_as_each_prompt_alone(tiny_smollm, label):
    model = tiny_smollm
    row = Row.parse(label)
    cells = prompts(model.tok_embd.shape[0])
    shared = score_cells(model, cells, row, max_new=4, stop_at_eos=False)
    for (ids, answer, span), sc in zip(cells, shared, strict=True):
        alone = score_answer(
            model, ids, answer, row, needle_span=span, max_new=4, stop_at_eos=False
        )
        same(sc, alone)
        assert sc.seconds > 0


def test_sharing_happened(tiny_smollm, monkeypatch):
    """The cells did start from shared states (a test of sameness alone would pass if none
    did): every cell past the first block starts at its last shared block."""
    import h2o.model.answer as answer

    model = tiny_smollm
    starts: list[int] = []
    real = answer.score_answer

    def spy(*a, start: PromptState | None = None, **kw):
        starts.append(0 if start is None else start.length)
        return real(*a, start=start, **kw)

    monkeypatch.setattr(answer, "score_answer", spy)
    cells = prompts(model.tok_embd.shape[0])
    answer.score_cells(model, cells, Row.parse("h2o@48:w50%"), max_new=2)
    assert sorted(starts) == sorted(min(c[2][0], len(c[0]) - 1) // 128 * 128 for c in cells)
    assert sum(starts) >= 5 * PROMPT_BLOCK


def test_a_start_must_fit_the_prompt(tiny_smollm):
    model = tiny_smollm
    row = Row.parse("full")
    ids, answer, _ = prompts(model.tok_embd.shape[0])[3]
    (state,) = prefix_states(model, ids, row, [PROMPT_BLOCK])
    with pytest.raises(ValueError, match="start"):
        score_answer(model, ids[:PROMPT_BLOCK], answer, row, start=state)
    cache = KVCache(model.config, len(ids))
    with pytest.raises(ValueError, match="holds 0 tokens"):
        read_prompt(model, ids, row, cache, None, start=state)


@needs_model
@pytest.mark.model
@pytest.mark.parametrize("label", ["full", "h2o@128:w50%", "h2o@128:w50%:prefill", "snapkv@128"])
def test_the_grids_cells_score_the_same_shared_on_the_real_model(label):
    """Three cells of the grid at 512 tokens (three depths, the needles they ask), shared and
    alone, on SmolLM2-135M."""
    from h2o.needle.cells import cell_needles, worker_model
    from h2o.needle.haystack import build_prompt
    from h2o.needle.needles import needle

    model = worker_model()
    row = Row.parse(label)
    built = [
        build_prompt(model.encode, needle(cell_needles(512, d)[0]), 512, d) for d in (25, 50, 100)
    ]
    cells = [(p.ids, p.answer_ids, p.needle_span) for p in built]
    shared = score_cells(model, cells, row, max_new=4)
    for (ids, answer, span), sc in zip(cells, shared, strict=True):
        same(sc, score_answer(model, ids, answer, row, needle_span=span, max_new=4))


@pytest.mark.parametrize("label", ["h2o@48:w50%", "h2o@48:w50%:prefill", "kivi2:r32:qprompt"])
def test_states_kept_past_the_reading_still_start_their_prompts(tiny_smollm, label):
    """Each state is the reading's at its stop, not a view of the reading as it goes on."""
    model = tiny_smollm
    row = Row.parse(label)
    cells = prompts(model.tok_embd.shape[0])
    chain = cells[-1][0]
    states = list(prefix_states(model, chain, row, [128, 256, 384]))
    checked = 0
    for ids, answer, span in cells:
        stop = shared_stop(ids, chain, row)
        if not stop:
            continue
        (state,) = [s for s in states if s.length == stop]
        kw = {"needle_span": span, "max_new": 3, "stop_at_eos": False}
        same(
            score_answer(model, ids, answer, row, start=state, **kw),
            score_answer(model, ids, answer, row, **kw),
        )
        checked += 1
    assert checked >= 4
