"""The page "Where should the budget go?": shipped results shown as they are, live allocator
grids equal to the ones the model ran with, the verdicts read from the numbers, and a recompute
that runs only on a click (AppTest; the model itself is replaced by a recorder here — the
library's own tests run it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from model_marks import needs_model
from streamlit.testing.v1 import AppTest

from app import model_runs
from app.budget_split import data as bd

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
PAGE = "views/budget_split.py"
RESULTS = Path(__file__).resolve().parents[1] / "traces" / "results"


def shipped() -> dict:
    return json.loads((RESULTS / bd.QUALITY_FILE).read_text())


def open_page(**state: object) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.switch_page(PAGE).run()
    for k, v in state.items():
        at.session_state[k] = v
    if state:
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest) -> dict[str, dict]:
    out = {}
    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        go.Figure(spec)  # the app builds figures unvalidated
        out[c.proto.id.split("-", 2)[-1]] = spec
    return out


def text(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


def _kv_rest(shares: dict) -> np.ndarray:
    rest = np.asarray(shares["rest"], dtype=np.float64)
    g = shares["group_size"]
    return rest.reshape(rest.shape[0], -1, g).mean(axis=2)


@pytest.mark.parametrize("budget", bd.ANSWER_BUDGETS)
def test_the_live_grids_are_the_ones_the_model_ran_with(budget):
    q = shipped()
    grids = bd.allocation_grids(budget, _kv_rest(q["calibration_shares"]))
    runs = [r for r in q["runs"] if r["budget_per_head"] == budget]
    assert runs
    own = {"h2o": 13, "streaming-llm": 0}  # the policy's bytes per slot beyond key + value
    for r in runs:
        a = grids[r["allocation"]]
        assert a.total == bd.N_LAYERS * bd.N_KV_HEADS * budget == r["total_slots"]
        # what the run holds, counted as the page counts it: 256 B a slot and the bookkeeping
        assert r["kv_bytes"] == a.total * (256 + own[r["policy"]])
        assert r["kv_bytes"] == bd.held_bytes(r["allocation"], budget, q["n_tokens"], r["policy"])
        assert a.budgets.tolist() == r["budgets"], r["allocation"]
        if "kinds" in r:
            assert a.kinds.tolist() == r["kinds"]


def test_the_page_shows_the_shipped_numbers_and_reads_its_verdicts_from_them(monkeypatch):
    def never(*a, **k):
        raise AssertionError("the page ran the model without a click")

    monkeypatch.setattr(model_runs, "model", never)
    at = open_page()
    assert not at.error, [e.value for e in at.error]
    figs = charts(at)
    assert set(figs) == {"wb_shares", "wb_grids", "wb_ppl"}
    q = shipped()
    budget = bd.ANSWER_BUDGETS[0]
    runs = {(r["policy"], r["allocation"]): r for r in q["runs"] if r["budget_per_head"] == budget}
    bars = [d for d in figs["wb_ppl"]["data"] if d["type"] == "bar"]
    assert len(bars) == len({p for p, _ in runs})
    for bar in bars:
        policy = "h2o" if bar["name"] == "H2O" else "streaming-llm"
        want = [f"{runs[policy, a]['perplexity']:.2f}" for a in bd.ALLOCATIONS]
        assert bar["text"] == want
    # The verdict follows the numbers: the best allocation per policy, and whether it beat uniform.
    for policy, label in (("h2o", "H2O"), ("streaming-llm", "StreamingLLM")):
        got = {a: runs[policy, a]["perplexity"] for a in bd.ALLOCATIONS}
        best = min(got, key=got.get)
        line = next(ln for ln in text(at).splitlines() if ln.startswith(f"- **{label}**"))
        assert f"({got[best]:.2f})" in line
        beaten = any(v < got["uniform"] for v in got.values())
        assert ("nothing beats uniform" in line) == (not beaten)
    # One colour axis for the three share panels, and one for the four grids.
    assert {d["coloraxis"] for d in figs["wb_shares"]["data"]} == {"coloraxis"}
    grids = figs["wb_grids"]["data"]
    heatmaps = [d for d in grids if d["type"] == "heatmap"]
    assert len(heatmaps) == 4 and {d["coloraxis"] for d in heatmaps} == {"coloraxis"}
    # each grid's printed budgets are a text layer of their own (black or white per cell)
    assert [d["mode"] for d in grids if d["type"] == "scatter"] == ["text"] * 4


def test_the_answers_are_marked_against_the_full_cache():
    at = open_page()
    answers = json.loads((RESULTS / f"allocation-generate-{bd.ANSWER_BUDGETS[0]}.json").read_text())
    full = next(a["text"] for a in answers if a["policy"] == "full")
    expected = full.strip().split(".")[0].strip().lower()
    right = sum(expected in a["text"].lower() for a in answers if a["policy"] != "full")
    (table,) = [t.value for t in at.table]  # a static table: it wraps, so all four columns fit
    cells = [str(v) for v in table.to_numpy().ravel()]
    assert sum(c.startswith("✓") for c in cells) == right
    assert sum(c.startswith("✗") for c in cells) == len(answers) - 1 - right


def test_switching_the_budget_redraws_every_grid_at_that_budget():
    at = open_page()
    at.session_state["wb_budget"] = 256
    at.run()
    grids = charts(at)["wb_grids"]
    assert "256 per head" in grids["layout"]["title"]["text"]


def test_a_missing_results_file_says_how_to_make_it(monkeypatch):
    monkeypatch.setattr(bd, "quality", lambda: None)
    at = open_page()
    assert "traces/results/README.md" in at.error[0].value
    assert not at.get("plotly_chart")


def test_recompute_runs_only_on_a_click_and_shows_what_it_got(monkeypatch):
    calls: list[tuple] = []
    rest = np.full((bd.N_LAYERS, bd.N_KV_HEADS), 0.5)

    def fake_cal(name, mtime, n):
        calls.append(("cal", name, n))
        return rest

    def fake_full(name, mtime, n, policy, budget, params, _index=1, _total=1):
        calls.append(("full", n))
        return {"perplexity": 20.0}

    def fake_run(name, mtime, n, policy, allocation, budget, r, _index=1, _total=1):
        calls.append(("run", policy, allocation, budget, n))
        return {
            "policy": policy,
            "allocation": allocation,
            "budget_per_head": budget,
            "kv_bytes": bd.held_bytes(allocation, budget, n, policy),
            "perplexity": 21.0,
            "n_tokens": n,
            "seconds": 1.0,
            "notes": [],
        }

    monkeypatch.setattr(bd, "calibration_rest", fake_cal)
    monkeypatch.setattr(model_runs, "perplexity_run", fake_full)
    monkeypatch.setattr(bd, "perplexity_run", fake_run)
    monkeypatch.setattr(model_runs, "model_path", lambda: Path("/dev/null"))
    at = open_page()
    assert calls == []
    at.button(key="wb_ppl_go").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert calls[0] == ("cal", "library", 512) and calls[1] == ("full", 512)
    assert sorted(c[1:3] for c in calls[2:]) == sorted(
        (p, a) for p in ("h2o", "streaming-llm") for a in bd.ALLOCATIONS
    )
    assert len(at.dataframe[-1].value) == 8
    n = len(calls)
    at.run()  # coming back shows the session's results without computing again
    assert len(calls) == n
    assert len(at.dataframe[-1].value) == 8


@needs_model
def test_the_recompute_functions_run_the_library_on_the_real_model(monkeypatch):
    """The page's model runs, on a short prefix, equal the library called directly."""
    from h2o.model import perplexity_under_eviction
    from h2o.model.allocation import allocated_factory, head_shares, make_allocation
    from h2o.model.snapkv import snapkv_generate

    model = model_runs.model()
    short = model_runs.text_ids("lighthouse", model_runs.text_ref("lighthouse")[1], 120)
    monkeypatch.setattr(
        model_runs, "text_ids", lambda name, mtime, n=None: short[: n or len(short)]
    )
    ref = ("lighthouse", 0)
    rest = bd.calibration_rest(*ref, 120)
    assert np.array_equal(rest, head_shares(model, short).kv_rest())
    rest_t = tuple(map(tuple, rest.tolist()))
    got = bd.perplexity_run(*ref, 120, "h2o", "duo", 64, rest_t)
    alloc = make_allocation(model, "duo", 64, rest)
    want = perplexity_under_eviction(model, short, allocated_factory("h2o", alloc)[0])
    assert got["perplexity"] == want.perplexity
    # every head's budget fits 120 tokens: 64 slots a head on average, 256 B + H2O's 13 each
    assert got["kv_bytes"] == 90 * 64 * (256 + 13) == bd.held_bytes("duo", 64, 120, "h2o")
    ans = bd.answer_run(*ref, "snapkv", "pyramid", 64, rest_t, 3)
    alloc = make_allocation(model, "pyramid", 64, rest)
    assert ans["text"] == snapkv_generate(model, short, alloc, 3).text
    held = sum(min(int(b), len(short)) for b in alloc.budgets.ravel())
    assert ans["kv_bytes"] == held * 256  # SnapKV keeps no bytes of its own per slot
