"""The Real model page under AppTest: without the model, with it, and each computation small.

AppTest runs the page in this process, so the model (``st.cache_resource``) loads once for the
file and the cached runs are shared between tests; every test opens a fresh session, so each
one still clicks the buttons it needs (a cached run then replays instantly).
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from model_marks import INSTALL, needs_model
from streamlit.testing.v1 import AppTest

import h2o
from app import data, model_runs
from h2o import analysis
from h2o.player import playback

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
PAGE = "views/real_model.py"
MAX_FIGURE_BYTES = 1_500_000


def open_page(**state: object) -> AppTest:
    """The Real model page, reached as a student would: the lesson, Step through, then here."""
    at = AppTest.from_file(MAIN, default_timeout=180)
    at.run()
    at.switch_page("views/step_through.py").run()
    at.switch_page(PAGE).run()
    for k, v in state.items():
        at.session_state[k] = v
    if state:
        at.run()
    ok(at)
    return at


def ok(at: AppTest) -> AppTest:
    assert not at.exception, [e.value for e in at.exception]
    return at


def click(at: AppTest, key: str) -> AppTest:
    at.button(key=key).click().run()
    return ok(at)


def charts(at: AppTest) -> dict[str, dict]:
    """The page's charts by key, each validated (the app builds them unvalidated)."""
    out = {}
    for c in at.get("plotly_chart"):
        spec = json.loads(c.proto.spec)
        go.Figure(spec)
        assert spec["layout"]["title"]["text"] and spec["layout"]["xaxis"]["title"]["text"]
        assert spec["layout"]["yaxis"]["title"]["text"]
        out[c.proto.id.split("-", 2)[-1]] = spec  # "$$ID-<hash>-<key>"
    return out


def sizes(at: AppTest) -> list[int]:
    return [len(c.proto.spec.encode()) for c in at.get("plotly_chart")]


def _values(arr: list | dict) -> np.ndarray:
    """A figure array as numbers (Plotly sends numpy arrays as base64 typed arrays)."""
    if isinstance(arr, dict):
        return np.frombuffer(base64.b64decode(arr["bdata"]), dtype=np.dtype(arr["dtype"]))
    return np.asarray(arr, dtype=float)


def markdown(at: AppTest) -> str:
    return "\n".join(m.value for m in at.markdown)


# -- without the model -----------------------------------------------------------------------------
@pytest.mark.slow
def test_missing_model_shows_the_install_command_and_the_traces(monkeypatch):
    monkeypatch.setenv("H2O_GGUF", "/nonexistent/SmolLM2.gguf")
    at = open_page()
    errors = " ".join(e.value for e in at.error)
    assert INSTALL in errors and "make setup" in errors
    # Section 1 needs no model: the trace buttons and their chart are there, nothing else is.
    keys = {b.key for b in at.button}
    assert "rm_open_lighthouse-L8-mean" in keys
    assert not keys & {"rm_story_go", "rm_ppl_go", "rm_gen_go"}
    assert len(at.get("plotly_chart")) == 1
    # The rest of the app keeps working.
    at.switch_page("views/all_policies.py").run()
    ok(at)
    assert len(at.get("plotly_chart")) >= 2


# -- section 1: the shipped traces (no model needed) -----------------------------------------------
@pytest.mark.slow
def test_trace_numbers_are_computed_from_replays():
    at = open_page()
    text = markdown(at)
    for stem in ("lighthouse-L8-mean", "lighthouse-L25-mean"):
        tr = h2o.load_trace(Path(MAIN).parents[1] / "traces" / f"{stem}.npz")
        rows = analysis.bench(
            tr, 128, 32, lineup=[("h2o", {"recent_window": 32}), ("streaming-llm", {"sinks": 4})]
        )
        line = next(p for p in text.split("\n") if p.startswith(f"**{stem}**"))
        assert f"H2O keeps **{rows[0]['retained_mass']:.2f}**" in line
        assert f"StreamingLLM **{rows[1]['retained_mass']:.2f}**" in line
        assert ("heavy hitters" in line) == (stem.endswith("L8-mean"))
    bars = charts(at)["rm_traces"]
    assert len(bars["data"]) == 3  # H2O, StreamingLLM, the oracle marks


@pytest.mark.parametrize(
    ("stem", "layer"), [("lighthouse-L8-mean", 8), ("lighthouse-L25-mean", 25)]
)
def test_trace_buttons_open_the_step_through(stem, layer):
    at = open_page()
    click(at, f"rm_open_{stem}")
    assert at.title[0].value == "Step through a replay"
    ss = at.session_state
    assert ss["trace"] == f"traces/{stem}.npz"
    assert (ss["budget"], ss["recent_window"], ss["sinks"]) == (128, 32, 4)
    assert (ss["policy_a"], ss["policy_b"], ss["step"]) == ("h2o", "streaming-llm", 512)
    (player,) = [e for e in at.get("bidi_component") if e.proto.component_name == "h2o_player"]
    header, _ = playback.decode(player.proto.bytes)
    assert header["start"]["step"] == 512
    a = header["range"][0]
    assert header["panels"][0]["stories"][512 - a].startswith("step 512:")
    origin = at.caption[0].value
    assert f"layer {layer}" in origin and "mean over its 9 query heads" in origin


def test_a_trace_that_fails_to_open_leaves_the_session_as_it_was(monkeypatch):
    at = open_page()
    names = ("trace", "budget", "recent_window", "sinks", "step", "_uploads")
    before = {k: at.session_state[k] for k in names if k in at.session_state}
    assert before["trace"] == "canonical"
    real = data.load

    def load(key, uploads):
        if key == "traces/lighthouse-L8-mean.npz":
            raise ValueError("the file changed under us")
        return real(key, uploads)

    monkeypatch.setattr(data, "load", load)  # after the page drew its buttons
    click(at, "rm_open_lighthouse-L8-mean")
    assert at.title[0].value.startswith("A real LLM inside")  # stayed here
    errors = " ".join(e.value for e in at.error)
    assert "Could not open `traces/lighthouse-L8-mean.npz` in the step-through view" in errors
    assert "the file changed under us" in errors
    assert {k: at.session_state[k] for k in names if k in at.session_state} == before


def _never(*args, **kwargs):
    raise AssertionError("the model ran without a click")


# -- with the model --------------------------------------------------------------------------------
@needs_model
def test_page_runs_and_waits_for_clicks():
    t0 = time.perf_counter()
    at = open_page()
    print(f"real-model page load: {time.perf_counter() - t0:.2f} s")
    assert not at.error, [e.value for e in at.error]
    keys = {b.key for b in at.button}
    assert {"rm_story_go", "rm_ppl_go", "rm_gen_go"} <= keys  # nothing heavy ran on its own
    assert len(at.get("plotly_chart")) == 1


@needs_model
def test_tiny_perplexity_run_makes_a_figure_and_a_table():
    at = open_page(
        rm_ppl_tokens=128,
        rm_ppl_budgets=[16, 32],
        rm_ppl_policies=["h2o", "streaming-llm"],
        rm_recent_window=8,
    )
    assert not at.error, [e.value for e in at.error]
    assert "5 runs on 128 tokens" in at.button(key="rm_ppl_go").label
    t0 = time.perf_counter()
    click(at, "rm_ppl_go")
    print(
        f"perplexity, 5 runs at 128 tokens (with the model load): {time.perf_counter() - t0:.1f}s"
    )
    fig = charts(at)["rm_ppl_curves"]
    names = [tr["name"] for tr in fig["data"]]
    assert names == ["H2O (recent_window=8)", "StreamingLLM (sinks=4)"]
    assert any(s["name"].startswith("full cache") for s in fig["layout"]["shapes"])
    table = at.dataframe[0].value
    assert list(table["policy"]) == ["full cache", *names]
    assert list(table.columns) == ["policy", "budget 16", "budget 32"]
    values = table[["budget 16", "budget 32"]].to_numpy(dtype=float)
    assert np.all(np.isfinite(values)) and np.all(values > 1)
    assert values[0, 0] == values[0, 1]  # the full cache does not depend on the budget
    assert "rm_ppl_go" not in {b.key for b in at.button}
    print("perplexity figure payloads (bytes):", sizes(at))
    assert max(sizes(at)) <= MAX_FIGURE_BYTES
    # A new session with the same settings: one click, every run a cache hit (the model is
    # never asked for: the runs come from the server's cache).
    again = open_page(
        rm_ppl_tokens=128,
        rm_ppl_budgets=[16, 32],
        rm_ppl_policies=["h2o", "streaming-llm"],
        rm_recent_window=8,
    )
    with pytest.MonkeyPatch.context() as mp:
        for name in ("model", "text_ids", "captured_layers"):
            mp.setattr(model_runs, name, _never)
        click(again, "rm_ppl_go")
    assert again.dataframe[0].value.equals(table)


@needs_model
def test_revisits_show_finished_runs_and_never_compute(monkeypatch):
    settings = {
        "rm_ppl_tokens": 128,
        "rm_ppl_budgets": [16],
        "rm_ppl_policies": ["h2o"],
        "rm_recent_window": 8,
    }
    at = open_page(**settings)
    click(at, "rm_ppl_go")
    table = at.dataframe[0].value
    # The server drops every cached run (max_entries, other sessions): coming back must show
    # this session's results, not run the model again.
    model_runs.perplexity_run.clear()
    for name in ("perplexity_run", "model", "text_ids", "captured_layers"):
        monkeypatch.setattr(model_runs, name, _never)
    at.switch_page("views/how_it_works.py").run()
    at.switch_page(PAGE).run()
    ok(at)
    assert at.dataframe[0].value.equals(table)
    assert "rm_ppl_go" not in {b.key for b in at.button}
    # A setting this session has not run: a button, still no computation.
    at.multiselect(key="w_rm_ppl_budgets").set_value([16, 32]).run()
    ok(at)
    assert "1 run on 128 tokens" in at.button(key="rm_ppl_go").label


@needs_model
def test_refused_combinations_name_the_fix():
    at = open_page(rm_ppl_tokens=128, rm_ppl_budgets=[16, 64], rm_recent_window=16, rm_sinks=4)
    errors = " ".join(e.value for e in at.error)
    assert "H2O refuses these settings: recent_window (16) must be smaller than budget (16)" in (
        errors
    )
    assert "Lower recent_window below 16, or raise the budget above 16" in errors
    assert "budget (64)" not in errors
    assert "TOVA" not in errors  # it keeps its own window of 1
    at.session_state["rm_sinks"] = 16
    at.run()
    ok(at)
    assert "Lower sinks below 16" in " ".join(e.value for e in at.error)


@needs_model
def test_layer_story_shares_and_where_h2o_wins(monkeypatch):
    at = open_page(rm_story_tokens=512, rm_story_budget=64)
    t0 = time.perf_counter()
    click(at, "rm_story_go")
    print(f"layer story at 512 tokens: {time.perf_counter() - t0:.1f} s")
    figs = charts(at)
    shares, mass = figs["rm_story_shares"], figs["rm_story_mass"]
    assert [tr["name"][:6] for tr in shares["data"]] == ["sinks ", "recent", "the mi"]
    h2o_mass, sl_mass = (np.asarray(_values(tr["y"])) for tr in mass["data"][:2])
    assert h2o_mass.shape == sl_mass.shape == (30,)
    assert h2o_mass[8] - sl_mass[8] > 0.2  # layer 8: heavy hitters
    assert abs(h2o_mass[25] - sl_mass[25]) < 0.1  # layer 25: sinks + recency
    assert "of 30 layers" in markdown(at)
    # A budget change only replays (cached capture): fast, no button.
    at.segmented_control(key="w_rm_story_budget").set_value(128).run()
    ok(at)
    assert "budget 128" in charts(at)["rm_story_mass"]["layout"]["title"]["text"]
    # Invalid: budget not above recent_window.
    at.session_state["rm_recent_window"] = 64
    at.segmented_control(key="w_rm_story_budget").set_value(64).run()
    ok(at)
    assert "Lower recent_window below 64" in " ".join(e.value for e in at.error)
    at.session_state["rm_recent_window"] = 32
    at.run()
    print("layer story figure payloads (bytes):", sizes(at))
    assert max(sizes(at)) <= MAX_FIGURE_BYTES
    # The server drops the capture: replays this session saw come back, a new one waits for a
    # click (it would need the model to capture again).
    model_runs._capture_store()[0].clear()
    with monkeypatch.context() as m:
        for name in ("model", "text_ids"):
            m.setattr(model_runs, name, _never)
        at.segmented_control(key="w_rm_story_budget").set_value(256).run()
        ok(at)
        assert any("dropped this capture" in i.value for i in at.info)
        assert "rm_story_go" in {b.key for b in at.button} and "rm_story_mass" not in charts(at)
        at.segmented_control(key="w_rm_story_budget").set_value(128).run()
        ok(at)
        assert "budget 128" in charts(at)["rm_story_mass"]["layout"]["title"]["text"]
        assert "rm_story_go" not in {b.key for b in at.button}
    at.segmented_control(key="w_rm_story_budget").set_value(256).run()
    click(at, "rm_story_go")  # the click captures again
    assert "budget 256" in charts(at)["rm_story_mass"]["layout"]["title"]["text"]
    # Any layer opens in the step-through view, as a session upload.
    at.selectbox(key="w_rm_story_layer").set_value(4).run()
    click(at, "rm_story_open")
    assert at.title[0].value == "Step through a replay"
    assert at.session_state["trace"].startswith("upload:lighthouse-L4-mean.npz#")
    assert "layer 4" in at.caption[0].value


@needs_model
def test_generation_checks_answers_against_the_full_cache(monkeypatch):
    at = open_page(rm_gen_budget=1024, rm_gen_policies=["h2o", "streaming-llm"])
    t0 = time.perf_counter()
    click(at, "rm_gen_go")
    print(f"generation, 3 runs on the lighthouse prompt: {time.perf_counter() - t0:.1f} s")
    table = at.dataframe[-1].value
    assert list(table["cache"]) == [
        "full cache",
        "H2O (recent_window=32) @ 1024",
        "StreamingLLM (sinks=4) @ 1024",
    ]
    full = table["answer"][0]
    # The classroom demo: the story asks, at its end, about a fact from its start; the full
    # cache and H2O at 1,024 slots recall it (the library's generate, as the page runs it).
    assert full.lstrip().startswith("brass owl"), full
    assert list(table["same answer as the full cache"]) == ["✓", "✓", "✗"]
    expected = full.rstrip(".,;:!?")
    assert f"answers **“{expected}”**" in markdown(at)
    assert any("✓" in s.value for s in at.success) and any("✗" in e.value for e in at.error)
    for size in sizes(at):
        assert size <= MAX_FIGURE_BYTES
    # Coming back after the server dropped the runs (and the model): the same answers, no run.
    markdown_before = markdown(at)
    model_runs.generation_run.clear()
    for name in ("generation_run", "model", "text_ids"):
        monkeypatch.setattr(model_runs, name, _never)
    at.switch_page("views/how_it_works.py").run()
    at.switch_page(PAGE).run()
    ok(at)
    assert at.dataframe[-1].value.equals(table)
    assert f"answers **“{expected}”**" in markdown(at) and "around token" in markdown_before
