"""Several rows of one length, each prompt read once for every row that reads it as the full
cache does.

``score_rows`` reads the needle grid's prompts of one length under the full cache once and
starts every row that reads a prompt as the full cache does (no policy stepped while reading,
no attention accumulated, the prompt not read quantized) from those states, each at its own
last shareable block; the other rows are scored alone. What must hold: every row's scores are
the ones ``score_cells`` gives that row alone, bit for bit (the log-probabilities, the greedy
tokens, what is held, the bytes). Checked on the tiny model (``tiny_model.py``) for a mix of
rows, and on the real model against lines of the shipped grid.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from model_marks import needs_model
from test_shared_prefix import prompts, same
from tiny_model import token_ids

from h2o.model.answer import (
    PromptState,
    prefix_states,
    reads_prompt_as_full,
    score_answer,
    score_cells,
    score_rows,
    shared_stop,
)
from h2o.model.rows import Row

#: Rows that read a prompt as the full cache does: the full cache, KIVI-style (quantized once
#: stored), Quest (it selects after the prompt), SnapKV and the presses (they compress before
#: their last prompt tokens; Expected Attention gathers its statistics from the first token, so
#: it shares nothing), a one-shot compression held quantized.
QUALIFY = [
    "full",
    "kivi4",
    "kivi2",
    "quest@48",
    "snapkv@48",
    "snapkv@48:avg5",
    "knorm@48",
    "kvzip@48",
    "expected-attention@48",
    "snapkv@48+kivi4",
]
#: Rows that do not: the prompt read quantized, eviction while reading (a policy's state),
#: under an allocation, H2O's prefill mode (the attention accumulated), a combination.
OTHERS = [
    "kivi2:r32:qprompt",
    "h2o@48:w50%",
    "tova@48",
    "streaming-llm@48",
    "h2o@48/pyramid",
    "h2o@48:w50%:prefill",
    "h2o@48:w50%+kivi4",
    "snapkv@48+kivi4:r32:qprompt",
]


def test_which_rows_read_a_prompt_as_the_full_cache(tiny_smollm):
    """The class fact agrees with what each row carries into a reading: no policies, no
    accumulated attention, and its prompt not read quantized."""
    for label in QUALIFY + OTHERS + ["h2o@48/duo", "snapkv@48/duo"]:
        row = Row.parse(label)
        reading = row.cache.begin(tiny_smollm, token_ids(200), 300)
        plain = (
            reading.policies is None and reading.acc is None and not row.option("quantized_prompt")
        )
        assert reads_prompt_as_full(row) is plain, label
        assert plain is (label in QUALIFY or label == "snapkv@48/duo"), label


@pytest.mark.slow
def test_rows_scored_together_score_as_each_row_alone(tiny_smollm):
    model = tiny_smollm
    cells = prompts(model.tok_embd.shape[0])
    rows = [Row.parse(x) for x in QUALIFY + OTHERS]
    together = score_rows(model, cells, rows, max_new=4, stop_at_eos=False)
    assert list(together) == [r.label for r in rows]
    for row in rows:
        alone = score_cells(model, cells, row, max_new=4, stop_at_eos=False)
        assert len(together[row.label]) == len(cells)
        for a, b in zip(together[row.label], alone, strict=True):
            same(a, b)
            assert a.read_bytes == b.read_bytes and a.produced == b.produced
            assert a.seconds > 0


def test_a_named_question_is_read_after_the_compression_shared_or_alone(tiny_smollm):
    """Cells that name their question (how many of the prompt's last tokens it is): each row
    scores them as :func:`score_answer` of that cell alone with that question, and for a
    compressed context the question named moves what is kept."""
    model = tiny_smollm
    questions = (12, 30, 40, 12, 30, 40, 12)  # one a cell
    cells = [(*c, q) for c, q in zip(prompts(model.tok_embd.shape[0]), questions, strict=True)]
    rows = [Row.parse(x) for x in ("full", "knorm@48", "kvzip@48", "snapkv@48")]
    together = score_rows(model, cells, rows, max_new=2, stop_at_eos=False)
    for row in rows:
        for (ids, answer, span, q), sc in zip(cells, together[row.label], strict=True):
            alone = score_answer(
                model, ids, answer, row, needle_span=span, question=q, max_new=2, stop_at_eos=False
            )
            same(sc, alone)
    ids, answer, span, q = cells[2]
    knorm = Row.parse("knorm@48")
    named = score_answer(model, ids, answer, knorm, needle_span=span, question=q, max_new=0)
    default = score_answer(model, ids, answer, knorm, needle_span=span, max_new=0)
    assert named.token_logprobs != default.token_logprobs


def test_each_row_scores_the_cells_it_asks_in_its_order(tiny_smollm):
    """A resumed job: rows missing different cells."""
    model = tiny_smollm
    cells = prompts(model.tok_embd.shape[0])
    rows = [Row.parse(x) for x in ("full", "snapkv@48", "h2o@48:w50%")]
    asked = {"full": [5, 1], "snapkv@48": [0, 2, 6], "h2o@48:w50%": [3]}
    got = score_rows(model, cells, rows, cells_of=asked, max_new=3)
    for row in rows:
        alone = score_cells(model, [cells[i] for i in asked[row.label]], row, max_new=3)
        assert len(got[row.label]) == len(alone)
        for a, b in zip(got[row.label], alone, strict=True):
            same(a, b)


def test_every_prompt_is_read_once_under_the_full_cache(tiny_smollm, monkeypatch):
    """The qualifying rows start each prompt at their own last shareable block, from states
    the full cache left; the prompts are read under no other row before those blocks."""
    import h2o.model.answer as answer

    model = tiny_smollm
    cells = prompts(model.tok_embd.shape[0])
    rows = [Row.parse(x) for x in ("full", "kivi4", "snapkv@48", "quest@48")]
    starts: list[tuple[str, int, int]] = []
    read_under: list[str] = []
    real_score, real_states = answer.score_answer, answer.prefix_states

    def spy_score(model, prompt, ans, row, *, start: PromptState | None = None, **kw):
        i = [c[0] for c in cells].index(list(prompt))
        starts.append((row.label, i, 0 if start is None else start.length))
        return real_score(model, prompt, ans, row, start=start, **kw)

    def spy_states(model, ids, row, stops, *a, **kw):
        read_under.append(row.label)
        return real_states(model, ids, row, stops, *a, **kw)

    monkeypatch.setattr(answer, "score_answer", spy_score)
    monkeypatch.setattr(answer, "prefix_states", spy_states)
    answer.score_rows(model, cells, rows, max_new=2)
    want = {(r.label, i, shared_stop(c[0], c[0], r)) for r in rows for i, c in enumerate(cells)}
    assert sorted(starts) == sorted(want)
    assert all(s for _, _, s in starts)  # every prompt here has a block to start from
    assert set(read_under) == {"full"}
    # one reading of the chain, and at most one more for each other prompt
    assert len(read_under) <= len(cells)


def test_rows_are_refused_when_malformed(tiny_smollm):
    cells = prompts(tiny_smollm.tok_embd.shape[0])[:2]
    with pytest.raises(ValueError, match="Row"):
        score_rows(tiny_smollm, cells, ["full"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="each row once"):
        score_rows(tiny_smollm, cells, [Row.parse("full"), Row.parse("full")])
    with pytest.raises(ValueError, match="outside"):
        score_rows(tiny_smollm, cells, [Row.parse("full")], cells_of={"full": [2]})
    with pytest.raises(ValueError, match="not asked"):
        score_rows(tiny_smollm, cells, [Row.parse("full")], cells_of={"kivi4": [0]})


def test_a_reading_goes_on_from_a_start_only_before_its_stops(tiny_smollm):
    model, row = tiny_smollm, Row.parse("full")
    ids = prompts(model.tok_embd.shape[0])[3][0]
    (state,) = prefix_states(model, ids, row, [256])
    with pytest.raises(ValueError, match="a start of 256 tokens"):
        list(prefix_states(model, ids, row, [256], start=state))
    (half,) = prefix_states(model, ids, row, [128])
    (resumed,) = prefix_states(model, ids, row, [256], start=half)
    assert np.array_equal(resumed.k, state.k) and np.array_equal(resumed.v, state.v)


# -- the real model, against the shipped grid ----------------------------------------------------
SHIPPED = Path(__file__).resolve().parents[1] / "traces" / "results" / "needle-grid.jsonl"


@needs_model
@pytest.mark.model
def test_rows_scored_together_give_the_shipped_lines_on_the_real_model():
    """Three rows of the grid at 512 tokens, scored as one job (``run_cells``), give the
    shipped lines: the answers, the log-probability (within the file's rounding), the bytes held
    and (Quest) read."""
    from h2o.needle.cells import run_cells, worker_model

    labels, depths = ("full", "quest@128", "snapkv@128"), (0, 50, 100)
    shipped = {}
    for s in SHIPPED.read_text(encoding="utf-8").splitlines():
        line = json.loads(s)
        if line["row"] in labels and line["length"] == 512 and line["depth"] in depths:
            shipped.setdefault((line["row"], line["depth"]), line)
    assert len(shipped) == len(labels) * len(depths)
    specs = [
        {"row": r, "length": 512, "depth": d, "needle": shipped[(r, d)]["needle"]}
        for r in labels
        for d in depths
    ]
    model = worker_model()
    got = run_cells(specs, load=lambda: model)
    for spec, line in zip(specs, got, strict=True):
        want = shipped[(spec["row"], spec["depth"])]
        assert (line["row"], line["depth"], line["needle"]) == (
            spec["row"],
            spec["depth"],
            spec["needle"],
        )
        assert line["produced"] == want["produced"] and line["correct"] == want["correct"]
        assert abs(line["logprob"] - want["logprob"]) <= 1e-3
        assert line["kv_bytes"] == want["kv_bytes"]
        assert line.get("read_bytes") == want.get("read_bytes")
    assert sum("read_bytes" in line for line in got) == len(depths)  # Quest's cells
