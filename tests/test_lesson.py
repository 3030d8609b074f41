"""The lesson page under AppTest: every chapter draws, every question reveals, links carry their
settings, presenter mode moves one chapter at a time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lesson_browser import report_painted
from streamlit.testing.v1 import AppTest

from app import lesson, model_runs

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
QUESTIONS = {"heavy": "6", "window": "recent_window 64", "spike": "H2O"}


def open_lesson(**query: object) -> AppTest:
    """The lesson as a browser shows it once the first chapter is painted: every chapter (tests
    see pages drawn whole: conftest.py)."""
    at = AppTest.from_file(MAIN, default_timeout=300)
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.first_paint
def test_self_study_draws_chapter_1_alone_until_the_browser_has_painted_it():
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    numbered = [h for h in headers(at) if h[:1].isdigit()]
    assert numbered == [f"1. {lesson.chapters()[0].title}"]
    assert len(at.get("plotly_chart")) >= 1  # chapter 1's figure is in the first run
    assert any("Chapters 2 to 10" in c.value for c in at.caption)
    report_painted(at)
    assert len([h for h in headers(at) if h[:1].isdigit()]) == 10
    assert not any("on their way" in c.value for c in at.caption)
    at.run()  # from then on, every run of the session draws every chapter
    assert len([h for h in headers(at) if h[:1].isdigit()]) == 10


def headers(at: AppTest) -> list[str]:
    return [h.value for h in at.header]


def test_the_lesson_is_the_first_page_and_draws_every_chapter():
    at = open_lesson()
    assert at.title[0].value == "H2O, step by step"
    numbered = [h for h in headers(at) if h[:1].isdigit()]
    assert numbered == [f"{c.number}. {c.title}" for c in lesson.chapters()]
    assert len(numbered) == 10
    assert not at.error, [e.value for e in at.error]
    # Chapter 1 computes bytes per token from the shapes: 7B = 32 × 32 × 128 × 2 × 2.
    table = at.dataframe[0].value.set_index("model")
    assert table.loc["Llama-2-7B", "bytes per token (fp16)"] == 524_288
    assert table.loc["Llama-3.1-70B", "bytes per token (fp16)"] == 327_680


@pytest.mark.parametrize("qid", sorted(QUESTIONS))
@pytest.mark.slow
def test_each_question_reveals_after_an_answer_or_on_request(qid):
    at = open_lesson()
    n_charts = len(at.get("plotly_chart"))
    radio = at.radio(key=f"lesson_q_{qid}")
    assert radio.value is None  # nothing is answered for the student
    at.button(key=f"lesson_reveal_{qid}").click().run()
    assert len(at.get("plotly_chart")) == n_charts + 1
    assert any(QUESTIONS[qid] in i.value for i in at.info)
    at = open_lesson()
    at.radio(key=f"lesson_q_{qid}").set_value(QUESTIONS[qid]).run()
    assert any(s.value.startswith(f"Right: **{QUESTIONS[qid]}**") for s in at.success)
    assert len(at.get("plotly_chart")) == n_charts + 1
    wrong = next(o for o in at.radio(key=f"lesson_q_{qid}").options if o != QUESTIONS[qid])
    at.radio(key=f"lesson_q_{qid}").set_value(wrong).run()
    assert any(w.value.startswith("Not quite") for w in at.warning)
    assert at.session_state[lesson.ANSWERS][qid] == wrong  # kept for the session


def test_presenter_mode_shows_one_chapter_and_moves_by_one():
    at = open_lesson(presenter=1, chapter=4)
    assert [h for h in headers(at) if h[:1].isdigit()] == ["4. The window is load-bearing"]
    at.button(key="lesson_next").click().run()
    assert [h for h in headers(at) if h[:1].isdigit()] == ["5. The stale spike"]
    assert at.query_params["chapter"] == "5"
    at.button(key="lesson_prev").click().run()
    at.button(key="lesson_prev").click().run()
    assert at.session_state["chapter"] == 3
    at.button(key="lesson_nav_10").click().run()
    assert at.session_state["chapter"] == 10
    assert at.button(key="lesson_next").disabled


def test_keys_move_chapters_like_a_clicker():
    at = open_lesson(presenter=1, chapter=2)
    # The keys' component (every page has another: app/charts.py links its descriptions).
    (keys,) = [c for c in at.get("bidi_component") if c.proto.component_name == "h2o_chapter_keys"]
    for go, want in (("next", 3), ("next", 4), ("prev", 3)):
        states = at._tree.get_widget_states()
        w = states.widgets.add()
        # Trigger values travel under the component's event id (see streamlit's bidi_component).
        w.id = f"$$STREAMLIT_INTERNAL_KEY_{keys.proto.id}__events"
        w.json_trigger_value = json.dumps([{"event": "go", "value": go}])
        at._run(states)
        assert not at.exception, [e.value for e in at.exception]
        assert at.session_state["chapter"] == want


def test_a_chapter_beyond_the_last_is_refused_by_name():
    at = open_lesson(presenter=1, chapter=42)
    assert "chapter=42" in at.error[0].value
    assert at.session_state["chapter"] == 1


@pytest.mark.parametrize(
    ("button", "page_title", "values"),
    [
        ("lesson_open_2", "Step through a replay", {"policy_a": "streaming-llm", "rows": "all"}),
        ("lesson_open_3", "Step through a replay", {"trace": "toy", "step": 8}),
        ("lesson_open_4", "recentWindow explorer", {"budget": 256, "recent_window": 32}),
        ("lesson_open_6", "All policies", {"recent_window": 64}),
    ],
)
def test_open_in_carries_the_chapter_settings(button, page_title, values):
    at = open_lesson()
    at.button(key=button).click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value.startswith(page_title)
    for name, value in values.items():
        assert at.session_state[name] == value, name
        assert at.query_params[name] == str(value), name


def test_the_real_model_chapter_shows_the_answers_computed_ahead():
    at = open_lesson(presenter=1, chapter=7)
    (frame,) = at.dataframe  # presenter mode: chapter 7 alone, its one table
    table = frame.value
    assert list(table.index) == [256, 512, 1024]
    assert all(t.startswith("brass owl") for t in table["full cache"])
    assert table.loc[1024, "H2O"].startswith("brass owl")  # the only budget where H2O remembers
    assert not table.loc[256, "StreamingLLM"].startswith("brass owl")
    (ppl,) = [c for c in at.get("plotly_chart") if "Perplexity vs cache budget" in c.proto.spec]
    spec = json.loads(ppl.proto.spec)
    names = [tr["name"] for tr in spec["data"]]
    assert "H2O (recent_window=32)" not in names and "H2O" in names  # labels, one per policy
    assert len(names) == 6


def test_the_real_model_chapter_recomputes_one_budget_on_a_click(monkeypatch):
    """The button runs the shipped file's runs (full cache + six policies, defaults, 8 tokens,
    no stop strings) through the model queue, and its row replaces the shipped one."""

    calls = []

    def fake(name, mtime, policy, budget, params, max_new, stops, _index=1, _total=1):
        calls.append((name, policy, budget, params, max_new, stops, _index, _total))
        return {"text": " brass owl." if policy in (None, "h2o") else " door."}

    monkeypatch.setattr(model_runs, "generation_run", fake)
    monkeypatch.setattr(model_runs, "model_path", lambda: Path("/dev/null"))
    at = open_lesson(presenter=1, chapter=7)
    assert calls == []
    at.selectbox(key="lesson_recompute_budget").set_value(256).run()
    at.button(key="lesson_recompute").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert [c[1] for c in calls] == [
        None,
        "h2o",
        "streaming-llm",
        "tova",
        "scissorhands",
        "sliding-window",
        "random",
    ]
    assert {c[2] for c in calls[1:]} == {256} and calls[0][2] is None
    assert all(c[0] == "lighthouse" and c[3:6] == ((), 8, ()) for c in calls)
    table = at.dataframe[0].value
    assert table.loc[256, "H2O"] == "brass owl." and table.loc[256, "TOVA"] == "door."
    root = Path(__file__).resolve().parents[1]
    shipped = json.loads((root / "traces/results/lighthouse-generate-512.json").read_text())
    h2o_512 = next(r["text"] for r in shipped if r["label"] == "h2o@512")
    assert table.loc[512, "H2O"] == h2o_512.strip()  # the other budgets stay as shipped
    assert "256 recomputed on this server now" in " ".join(c.value for c in at.caption)


@pytest.mark.parametrize("chapter", range(1, 11))
@pytest.mark.slow
def test_presenter_mode_says_each_sentence_once(chapter):
    """Projected, a chapter's core is in place and its details under More: a finding shown in
    place is not listed again under More (the lecturer would read it twice)."""
    at = open_lesson(presenter=1, chapter=chapter)
    pieces = []
    for m in at.markdown:
        for para in m.value.split("\n\n"):
            pieces += [line.removeprefix("- ").strip() for line in para.split("\n")]
    long = [p for p in pieces if len(p) >= 40]
    twice = sorted({p for p in long if long.count(p) > 1})
    assert not twice, twice
