"""The lesson as a notebook (``notebooks/lesson.ipynb``), run headless, and the
player inside marimo.

The committed notebook is what ``notebooks/build_lesson.py`` builds from the app's lesson now,
has no outputs, and states no number in its text (every number comes from a code cell). It runs
top to bottom in a fresh python3 kernel (nbclient) with no error and no warning; the cells this
test appends check that the last chapter's policy, defined in a cell, is in its player, and that
a broken one is a clear error. With the real model, the chapter 7 cell that captures a trace runs
too. Each chapter's cell is ``show(n)``: the app's chapter, drawn by its own code; its controls
take their defaults or the values given, its question folds its answer, and its button to the
Step-through page is the player. The needle chapters (7 and 8) compute from whatever the result
files hold when they run: a partial file, a cut-off line, no file at all. marimo's
``mo.ui.anywidget`` takes the player: a marimo notebook holding it runs and exports.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
LESSON = NOTEBOOKS / "lesson.ipynb"

nbformat = pytest.importorskip("nbformat")
sys.path.insert(0, str(NOTEBOOKS))
import build_lesson  # noqa: E402  (notebooks/, beside the notebook it builds)
from lab_server import MARIMO_NOTEBOOK  # noqa: E402
from model_marks import needs_model  # noqa: E402


def load() -> nbformat.NotebookNode:
    return nbformat.read(LESSON, as_version=4)


# -- the notebook as committed ---------------------------------------------------------------------
def test_the_committed_notebook_is_what_the_build_makes_from_the_apps_lesson():
    done = subprocess.run(
        [sys.executable, str(NOTEBOOKS / "build_lesson.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr


def test_the_notebook_has_no_outputs_and_each_chapter_is_the_apps_own():
    nb = load()
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    titles = build_lesson.chapter_titles()
    assert len(titles) >= 10  # the app's lesson: ten chapters, "Evict or compress?" the 8th
    assert titles[8] == "Evict or compress?"
    heads = [i for i, c in enumerate(nb.cells) if c.source.startswith("## ")]
    said = [(int(n), t) for n, t in (nb.cells[i].source[3:].split(" · ", 1) for i in heads)]
    assert said == list(titles.items())  # every chapter, in order, as the app names it
    for i, (number, _) in zip(heads, said, strict=True):
        # one cell draws it, with the app's own code: the notebook restates none of it
        assert nb.cells[i + 1].source == f"show({number})"


def test_no_markdown_cell_states_a_number():
    for cell in load().cells:
        if cell.cell_type == "markdown":
            build_lesson.check_no_numbers(cell.source)
    for said in ("keeps 0.81 of the mass", "at budget 256", "a 2× gain", "(12 %)"):
        with pytest.raises(ValueError, match="states a number"):
            build_lesson.check_no_numbers(said)
    for name in ("## 4 · The window", "H2O and SmolLM2-135M", "(Liu et al., 2023)", "float64"):
        build_lesson.check_no_numbers(name)


# -- show(n): a chapter drawn by the app's code, in the notebook -----------------------------------
@pytest.fixture
def shown(monkeypatch):
    """What :func:`app.lesson.notebook.show` displays, in order (and its printed settings)."""
    pytest.importorskip("IPython")
    from app.lesson import notebook

    out: list = []
    monkeypatch.setattr(notebook, "display", out.append)
    return notebook, out


def markdown_of(out: list) -> str:
    return "\n\n".join(o.data for o in out if type(o).__name__ == "Markdown")


def test_a_chapters_settings_are_its_controls_defaults_or_the_values_given(shown, capsys):
    from app.lesson import chapters_1_3
    from h2o import explain

    notebook, out = shown
    notebook.show(1)
    default = markdown_of(out)
    assert chapters_1_3.memory_sentence(explain.LLAMA2_7B, 32_768, 1024, 1) in default
    printed = capsys.readouterr().out
    assert "Settings: context=32768, budget=1024, batch=1" in printed
    assert "budget: 256, 512, 1024, 2048, 4096" in printed  # the values a student may give
    out.clear()
    notebook.show(1, context=8_192, batch=8)
    given = markdown_of(out)
    assert chapters_1_3.memory_sentence(explain.LLAMA2_7B, 8_192, 1024, 8) in given
    assert chapters_1_3.memory_sentence(explain.LLAMA2_7B, 32_768, 1024, 1) not in given
    assert sum(type(o).__name__ == "Figure" for o in out) == 1
    with pytest.raises(
        ValueError,
        match=r"chapter 1 has no setting 'window' \(its settings: context, budget, batch\)",
    ):
        notebook.show(1, window=64)
    with pytest.raises(ValueError, match="context=1000 is not a value of chapter 1's"):
        notebook.show(1, context=1000)
    with pytest.raises(ValueError, match="the lesson has no chapter 11"):
        notebook.show(11)


def test_a_question_shows_its_options_and_folds_its_answer(shown):
    import h2o
    from h2o import analysis, explain

    notebook, out = shown
    notebook.show(3)
    toy = h2o.toy_trace()
    fit = analysis.suggested(toy)
    policy = h2o.H2O(fit["budget"], recent_window=fit["recent_window"])
    rep = h2o.replay(policy, toy, fit["top_k"], record=True)
    f = explain.heavy_facts(toy, rep)
    (question,) = [o.data for o in out if "**Predict:**" in getattr(o, "data", "")]
    assert question.startswith(f"**Predict:** which position does H2O evict at step {f.t}?")
    assert " · ".join(f"`{p}`" for p in f.evictable) in question
    folded = question[question.index("<details>") :]
    assert f"The answer: **{f.victim}**" in folded and folded.endswith("</details>")


def test_a_button_to_the_step_through_page_is_the_player_at_its_step(shown):
    import h2o
    from h2o import explain
    from h2o.player import playback

    notebook, out = shown
    notebook.show(2)
    (player,) = [o for o in out if type(o).__name__ == "Player"]
    trace = h2o.canonical_trace()
    rep = h2o.replay(h2o.StreamingLLM(256, sinks=4), trace, 32, record=True)
    lost = explain.lost_heavy_hitter(rep, trace, 256)
    header, _ = playback.decode(player.payload)
    assert [p["label"] for p in header["panels"]] == ["StreamingLLM", "H2O"]
    assert header["trace"] == "canonical" and header["budget"] == 256
    assert header["start"]["step"] == lost.evicted_at
    out.clear()
    notebook.show(6)  # its button opens All policies: no player
    assert not [o for o in out if type(o).__name__ == "Player"]


def test_a_chapter_leaves_the_kernels_main_module_as_it_was(shown):
    """Streamlit's runner installs its script as ``__main__``: ``show`` puts the kernel's back,
    so that what a cell defines pickles, and a process spawned later starts."""
    import sys

    notebook, _ = shown
    main = sys.modules["__main__"]
    notebook.show(6)
    assert sys.modules["__main__"] is main


def test_a_link_to_another_chapter_shows_its_words(shown):
    notebook, out = shown
    notebook.show(9)  # the app links each of the card's points to the chapter that showed it
    text = markdown_of(out)
    assert "](#" not in text  # the app's anchors are not the notebook's
    assert "chapter 4, The window is load-bearing" in text


# -- the notebook, run -----------------------------------------------------------------------------
CHECKS = """\
import json
from h2o.player import playback

w = Player(trace, MyPolicy, "h2o", budget=budget, recent_window=window9)
print(json.dumps([p["label"] for p in playback.decode(w.payload)[0]["panels"]]))"""
BROKEN = """\
class Broken(ScoredPolicy):
    name = "broken-in-a-cell"
    label = "Broken"

    def _accumulate(self, score, attn):
        raise RuntimeError("my rule has a bug")


Player(trace, Broken, "h2o", budget=budget)"""


def run(nb: nbformat.NotebookNode, timeout: int = 600) -> nbformat.NotebookNode:
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",  # the venv's own (jupyter_client starts it with sys.executable)
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    return nb


def with_checks(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb.cells.append(nbformat.v4.new_code_cell(CHECKS))
    broken = nbformat.v4.new_code_cell(BROKEN)
    broken.metadata["tags"] = ["raises-exception"]  # nbclient runs on past this one cell
    nb.cells.append(broken)
    return nb


def outputs(cell, kind: str) -> list:
    return [o for o in cell.get("outputs", []) if o.output_type == kind]


@pytest.fixture(scope="module")
def ran() -> nbformat.NotebookNode:
    return run(with_checks(load()))


@pytest.mark.slow
def test_the_lesson_runs_top_to_bottom_with_no_error_and_no_warning(ran):
    *lesson, checks, _broken = ran.cells
    for i, cell in enumerate(lesson):
        if cell.cell_type == "code":
            assert outputs(cell, "error") == [], f"cell {i}: {cell.source[:80]}"
            assert [o.text for o in outputs(cell, "stream") if o.name == "stderr"] == []
    shown = [o for c in lesson if c.cell_type == "code" for o in c.outputs if "data" in o]
    plots = [o for o in shown if "application/vnd.plotly.v1+json" in o.data]
    players = [o for o in shown if "application/vnd.jupyter.widget-view+json" in o.data]
    text = "\n".join(o.data.get("text/markdown", "") for o in shown)
    assert len(plots) >= 12 and len(players) == 4  # the model's player only when it is run
    assert "nan" not in text.lower().replace("financ", "")
    assert json.loads(outputs(checks, "stream")[0].text) == ["My policy", "H2O"]


def test_a_broken_policy_in_a_cell_is_a_clear_error(ran):
    (error,) = outputs(ran.cells[-1], "error")
    assert error.ename == "ValueError"
    assert error.evalue == (
        "policy A (Broken(budget=256, recent_window=32)) failed on canonical: my rule has a bug"
    )
    assert not [o for o in ran.cells[-1].outputs if "data" in o]  # no widget, blank or not


# -- the needle chapters, on partial and missing result files -------------------------------------
NEEDLE_GRID_TITLE = "Needle answered right, per prompt length and depth"


def needle_notebook(results: Path) -> nbformat.NotebookNode:
    """The setup cell, then chapters 7 and 8 (the needle grid, the frontier), reading the result
    files from ``results``."""
    nb = load()
    setup = [c for c in nb.cells[:3] if c.cell_type == "code"]
    point = nbformat.v4.new_code_cell(
        f"from h2o.needle import results\n\nresults.RESULTS_DIR = Path({str(results)!r})"
    )
    nb.cells = [*setup, point, *(nbformat.v4.new_code_cell(f"show({n})") for n in (7, 8))]
    return nb


def shown_markdown(cell) -> str:
    return "\n\n".join(
        o.data["text/markdown"] for o in cell.outputs if "text/markdown" in o.get("data", {})
    )


def plot_titles(cell) -> list[str]:
    return [
        o.data["application/vnd.plotly.v1+json"]["layout"]["title"]["text"]
        for o in cell.outputs
        if "application/vnd.plotly.v1+json" in o.get("data", {})
    ]


@pytest.mark.slow
def test_the_needle_chapters_compute_from_a_partial_file_and_say_what_is_missing(tmp_path):
    from app.lesson import needle
    from app.needle import claims, family, frontier, grid
    from h2o.needle import findings, results

    grid_lines = (results.RESULTS_DIR / results.GRID_FILE).read_text(encoding="utf-8").splitlines()
    front_lines = (
        (results.RESULTS_DIR / results.FRONTIER_FILE).read_text(encoding="utf-8").splitlines()
    )
    if len(grid_lines) < 4 or len(front_lines) < 3:
        pytest.skip("the shipped needle files are not in this copy")
    partial = tmp_path / "partial"
    partial.mkdir()
    # A run still going: the first lines of each, and a line cut off mid-write in the grid.
    half = grid_lines[: len(grid_lines) // 2]
    (partial / results.GRID_FILE).write_text("\n".join([*half, '{"row": "h2o']) + "\n")
    # The frontier's first lines and its full cache's (each row is put against it; a text
    # without one is not charted).
    full = [x for x in front_lines[3:] if json.loads(x)["kind"] == "full"]
    (partial / results.FRONTIER_FILE).write_text("\n".join(front_lines[:3] + full) + "\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    ran_partial, ran_empty = run(needle_notebook(partial)), run(needle_notebook(empty))

    for nb in (ran_partial, ran_empty):
        for cell in nb.cells:
            assert outputs(cell, "error") == [], cell.source[:80]
            assert [o.text for o in outputs(cell, "stream") if o.name == "stderr"] == []
    # Nothing to read: each chapter says which file is not there, and draws nothing from it.
    *_, grid_cell, frontier_cell = ran_empty.cells
    for cell, name in ((grid_cell, results.GRID_FILE), (frontier_cell, results.FRONTIER_FILE)):
        assert f"{name}` is not in this copy" in shown_markdown(cell)
    assert NEEDLE_GRID_TITLE not in plot_titles(grid_cell)
    assert plot_titles(frontier_cell) == []

    # The partial files: the sentences are the app's own, on what the files hold now.
    cells = results.read_grid(partial / results.GRID_FILE).records
    rows = grid.rows(cells)
    shown = needle.lesson_rows(rows)
    ppl = frontier.ppl_points(results.read_frontier(partial / results.FRONTIER_FILE).records)
    acc = frontier.accuracy_points(cells, needle.LESSON_LENGTH)
    *_, grid_cell, frontier_cell = ran_partial.cells
    cells7 = [c for c in cells if c.length <= needle.LESSON_MAX_LENGTH]  # the chapter's lengths
    said = shown_markdown(grid_cell)
    assert NEEDLE_GRID_TITLE in plot_titles(grid_cell)
    assert (
        f"{claims.full_note(cells7)}\n\n"
        f"{claims.scores_sentence(grid.scores(cells7, shown), cells7)}\n\n"
        + claims.modes_sentence(cells7, "h2o@256:w50%", "h2o@256:w50%:prefill")
    ) in said
    assert (
        claims.window_sweep_sentence(cells7, findings.sweep_rows(), findings.SWEEP_LENGTH) in said
    )
    since = family.family_sentences(cells7, needle.LESSON_BUDGET)
    assert "\n\n".join(since) in said  # the family since H2O, the app's own sentences too
    assert "1 line(s) skipped" in said
    assert claims.shown_sentence(shown, rows, cells7) in said
    verdicts = shown_markdown(frontier_cell)
    memory = frontier.default_memory(ppl)
    assert memory is not None
    assert claims.verdict(ppl, memory, claims.PERPLEXITY) in verdicts
    acc_memory = frontier.default_memory(acc)
    if acc_memory is not None:
        said = claims.verdict(acc, acc_memory, claims.ACCURACY)
        assert f"{said[0].lower()}{said[1:]}" in verdicts
    assert len(plot_titles(frontier_cell)) == 1


@needs_model
def test_chapter_7_runs_the_real_model_when_asked():
    nb = load()
    (cell,) = [c for c in nb.cells if "RUN_THE_MODEL = False" in c.source]
    cell.source = cell.source.replace("RUN_THE_MODEL = False", "RUN_THE_MODEL = True", 1)
    run(nb)
    (shown,) = [o for o in cell.outputs if "data" in o]
    assert "application/vnd.jupyter.widget-view+json" in shown.data
    assert outputs(cell, "error") == []


# -- marimo ----------------------------------------------------------------------------------------


@pytest.mark.skipif(importlib.util.find_spec("marimo") is None, reason="marimo is not installed")
@pytest.mark.slow
def test_marimo_wraps_the_player_and_exports_it(tmp_path):
    path = tmp_path / "player_nb.py"
    path.write_text(MARIMO_NOTEBOOK, encoding="utf-8")
    out = tmp_path / "player.html"
    done = subprocess.run(
        [sys.executable, "-m", "marimo", "export", "html", str(path), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    html = out.read_text(encoding="utf-8")
    assert "marimo-anywidget" in html
    assert '"labels": ["H2O", "Scissorhands"]' in html.replace('\\"', '"')
    # marimo holds the module apart; plotly.js is not in the state: the page asks for it
    assert '"synced": ["css", "payload"]' in html.replace('\\"', '"')
