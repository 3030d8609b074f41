"""Quest's bytes read as a run counts them (``PageReads`` in h2o/model/caches/quest_cache.py): a
step is a query position *and the pass that read it*. The answer path reads the answer's
positions twice — teacher-forced, then greedy after a rewind to the prompt — and each is a step
of its own keys, never one step with the keys of both. Counted by hand on the real SmolLM2-135M
with the literal page rule (test_quest.py's transcription of mit-han-lab/Quest's
``quest_attention.py``); every shipped Quest line reads at most what it holds; and the cheapest
shipped Quest cell recomputed gives its shipped bytes read."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from model_marks import needs_model
from test_quest import literal_mask

from h2o.model.caches.quest_cache import DENSE_LAYERS, PAGE, PageReads, QuestCache
from h2o.model.rows import Row

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "traces" / "results"
SHIPPED = ("needle-grid.jsonl", "followup.jsonl", "frontier.jsonl")


def shipped_quest_lines() -> list[tuple[str, dict]]:
    """``(file, line)`` of every shipped line whose row is a Quest row."""
    quest: dict[str, bool] = {}
    out = []
    for name in SHIPPED:
        for text in (RESULTS / name).read_text(encoding="utf-8").splitlines():
            if not text.strip():
                continue
            line = json.loads(text)
            label = line["row"]
            if label not in quest:
                quest[label] = isinstance(Row.parse(label).cache, QuestCache)
            if quest[label]:
                out.append((name, line))
    return out


def test_no_shipped_quest_line_reads_more_than_it_holds() -> None:
    lines = shipped_quest_lines()
    # every file that ships Quest rows has some: the check below is not over nothing
    assert {name for name, _ in lines} == set(SHIPPED)
    for name, line in lines:
        where = f"{name}: {line['row']} {line.get('length', line.get('tokens'))}"
        assert 0 < line["read_bytes"] <= line["kv_bytes"], where
        if "read_share" in line:  # over a text: the mean share of what each step held
            assert 0 < line["read_share"] <= 1, where


# -- on the real model ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model():
    from h2o.model import SmolLM

    return SmolLM.load()


class Watched(PageReads):
    """The run's own selector, keeping what each of its calls was given."""

    def __init__(self, budget: int, group_size: int, calls: list) -> None:
        super().__init__(budget, group_size)
        self.calls = calls

    def __call__(self, layer, q, keys, start):
        if layer >= DENSE_LAYERS:
            self.calls.append((q.copy(), keys.copy(), start))
        return super().__call__(layer, q, keys, start)


def watch(monkeypatch) -> tuple[list, list]:
    """Make every Quest row's selector a :class:`Watched`: ``(selectors, calls)``."""
    made: list[Watched] = []
    calls: list = []

    def selector(self, model):
        made.append(Watched(int(self.row.budget), model.config.group_size, calls))
        return made[-1]

    monkeypatch.setattr(QuestCache, "selector", selector)
    return made, calls


def keys_by_hand(q, keys, start: int, budget: int, gs: int) -> list[int]:
    """Keys each query row of one call reads: the reference's pages of each query head over the
    keys up to the row's own, and per KV head the union of its query heads' pages."""
    H = q.shape[0]
    out = []
    for r in range(q.shape[1]):
        t = start + r
        kv = np.repeat(keys[:, : t + 1].astype(np.float64), gs, axis=0)
        mask = literal_mask(q[:, r].astype(np.float64), kv, budget)  # (H, t + 1)
        out.append(int(mask.reshape(H // gs, gs, t + 1).any(axis=1).sum()))
    return out


def step_bytes(cfg, n: int, keys: float) -> int:
    """One step's reads with ``n`` keys held: the dense layers' keys and values, the others'
    page summaries (two fp16 keys a page), and ``keys`` keys and values read over the sparse
    layers and KV heads (fp16)."""
    slot = 2 * cfg.head_dim * 2
    pages = -(-n // PAGE)
    dense = DENSE_LAYERS * cfg.n_kv_heads * n * slot
    summaries = (cfg.n_layers - DENSE_LAYERS) * cfg.n_kv_heads * pages * 2 * cfg.head_dim * 2
    return int(dense + summaries + round(keys * slot))


@pytest.fixture(scope="module")
def text_ids(model) -> list[int]:
    text = (ROOT / "traces" / "texts" / "library.txt").read_text(encoding="utf-8")
    return model.encode(text)[:170]


@needs_model
def test_the_answer_path_reads_each_position_once_a_pass(model, text_ids, monkeypatch) -> None:
    """Teacher-forced answer, then greedy from the prompt: the answer's positions read twice,
    each pass's steps their own; the bytes read are the mean over those steps of what the pages
    each step selected hold, and no more than the cache holds."""
    from h2o.model.answer import score_answer

    made, calls = watch(monkeypatch)
    cfg, budget, max_new = model.config, 48, 5
    prompt, answer = text_ids[:160], text_ids[160:166]
    T = len(prompt)
    row = Row.parse(f"quest@{budget}")
    sc = score_answer(model, prompt, answer, row, max_new=max_new, stop_at_eos=False)
    assert len(made) == 1 and len(sc.produced_ids) == max_new
    sparse = cfg.n_layers - DENSE_LAYERS
    # one chunk of the answer's len - 1 rows a sparse layer, then max_new - 1 single-row steps
    # a sparse layer (the first token of each comes from the prompt's last state)
    assert [c[0].shape[1] for c in calls[:sparse]] == [len(answer) - 1] * sparse
    assert [c[0].shape[1] for c in calls[sparse:]] == [1] * (sparse * (max_new - 1))
    forced = np.zeros(len(answer) - 1)
    greedy = np.zeros(max_new - 1)
    for q, keys, start in calls:
        got = keys_by_hand(q, keys, start, budget, cfg.group_size)
        if q.shape[1] > 1:
            forced += got
        else:
            greedy[start - T] += got[0]
    steps = [(T + i, k) for i, k in enumerate(forced)] + [(T + i, k) for i, k in enumerate(greedy)]
    # at a budget of 48 each query head reads 3 of the step's 11 pages: a KV head's three query
    # heads read at most 9, fewer keys than the cache holds, and at least one head's 3 pages,
    # the last of which may hold the step's own key alone
    for t, k in steps:
        assert sparse * cfg.n_kv_heads * (2 * PAGE + 1) <= k < sparse * cfg.n_kv_heads * (t + 1)
    # the row's figure: the mean over the steps, the dense layers and summaries at the prompt
    want = step_bytes(cfg, T, np.mean([k for _, k in steps]))
    assert sc.read_bytes == want
    assert sc.read_bytes < sc.kv_bytes == row.kv_bytes(cfg, T)
    # step by step, in the order read: the answer's positions, then the same positions again
    assert row.cache.step_reads(cfg, made[0]) == [
        (t + 1, step_bytes(cfg, t + 1, k)) for t, k in steps
    ]


@needs_model
def test_the_followup_reads_each_position_once_a_pass(model, text_ids, monkeypatch) -> None:
    """The second question: the first answer, the turn and the second answer teacher-forced,
    the second answer greedy from the question, the first greedy from the prompt — every
    position and pass a step."""
    from h2o.model.followup import score_followup

    made, calls = watch(monkeypatch)
    cfg, budget, max_new = model.config, 48, 3
    prompt, a1, turn, a2 = text_ids[:140], text_ids[140:144], text_ids[144:152], text_ids[152:156]
    row = Row.parse(f"quest@{budget}")
    sc = score_followup(model, prompt, a1, turn, a2, row, max_new=max_new)

    def forwards(produced: list[int]) -> int:  # a greedy run reads each token but a last one
        return len(produced) - 1 if len(produced) == max_new else len(produced)

    n_steps = len(a1) + len(turn) + len(a2) + forwards(sc.produced) + forwards(sc.second_produced)
    total = sum(sum(keys_by_hand(q, k, s, budget, cfg.group_size)) for q, k, s in calls)
    assert made[0].steps == n_steps
    assert sc.read_bytes == step_bytes(cfg, len(prompt), total / n_steps)
    assert sc.read_bytes < sc.kv_bytes


@needs_model
def test_the_cheapest_shipped_quest_cell_reads_what_it_shipped(model) -> None:
    """Recomputed today (the CLI's and the app's cell function), the cell gives its shipped
    bytes read, bytes held and answer, and its log-prob to the 4 decimals shipped."""
    from h2o.needle.cells import run_cell

    cells = [line for name, line in shipped_quest_lines() if name == "needle-grid.jsonl"]
    cell = min(cells, key=lambda c: (c["length"], c["prompt_tokens"], c["seconds"]))
    spec = {k: cell[k] for k in ("row", "length", "depth", "needle")}
    got = run_cell(spec, load=lambda: model)
    assert (got["read_bytes"], got["kv_bytes"]) == (cell["read_bytes"], cell["kv_bytes"]), spec
    assert got["produced"] == cell["produced"] and got["prompt_tokens"] == cell["prompt_tokens"]
    assert got["logprob"] == pytest.approx(cell["logprob"], abs=1e-3)
