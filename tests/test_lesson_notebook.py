"""The lesson as a notebook (``notebooks/lesson.ipynb``), run headless, and the
player inside marimo.

The committed notebook is what ``notebooks/build_lesson.py`` builds from the app's lesson now,
has no outputs, and states no number in its text (every number comes from a code cell). It runs
top to bottom in a fresh python3 kernel (nbclient) with no error and no warning; the cells this
test appends check that the last chapter's policy, defined in a cell, is in its player, and that
a broken one is a clear error. With the real model, the chapter 7 cell that captures a trace runs
too. The needle cells (chapter 7's grid, chapter 8) compute from whatever the result files hold
when they run: a partial file, a cut-off line, no file at all. marimo's ``mo.ui.anywidget``
takes the player: a marimo notebook holding it runs and exports.
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


def test_the_notebook_has_no_outputs_and_every_chapter():
    nb = load()
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    headings = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "markdown"]
    chapters = [h for h in headings if h.startswith("## ")]
    titles = build_lesson.chapter_titles()
    assert len(titles) >= 10  # the app's lesson: ten chapters, "Evict or compress?" the 8th
    said = [(int(n), t) for n, t in (h[3:].split(" · ", 1) for h in chapters)]
    assert said == sorted(titles.values())  # every chapter, in order, as the app names it
    assert (8, "Evict or compress?") in said


def test_no_markdown_cell_states_a_number():
    for cell in load().cells:
        if cell.cell_type == "markdown":
            build_lesson.check_no_numbers(cell.source)
    for said in ("keeps 0.81 of the mass", "at budget 256", "a 2× gain", "(12 %)"):
        with pytest.raises(ValueError, match="states a number"):
            build_lesson.check_no_numbers(said)
    for name in ("## 4 · The window", "H2O and SmolLM2-135M", "(Liu et al., 2023)", "float64"):
        build_lesson.check_no_numbers(name)


def test_a_paragraph_the_app_no_longer_writes_stops_the_build():
    text = build_lesson.literal("chapters_4_6", "window", "So the window is needed.")
    assert text.startswith("So the window is needed.")
    with pytest.raises(SystemExit, match="no longer writes a paragraph with"):
        build_lesson.literal("chapters_4_6", "window", "A sentence the app never wrote")
    with pytest.raises(SystemExit, match="no longer writes"):
        build_lesson.literal("chapters_4_6", "no_such_chapter", "So the window")


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


# -- the needle cells, on partial and missing result files ---------------------------------------
def needle_notebook(results: Path) -> nbformat.NotebookNode:
    """The setup cells, then chapter 7's needle-grid cell and chapter 8's cells, reading the
    result files from ``results``."""
    nb = load()
    setup = [c for c in nb.cells[:3] if c.cell_type == "code"]
    (grid_cell,) = [c for c in nb.cells if "read_grid(" in c.source]
    start = next(i for i, c in enumerate(nb.cells) if c.source.startswith("## 8 · "))
    point = nbformat.v4.new_code_cell(f"needle_data.RESULTS_DIR = Path({str(results)!r})")
    nb.cells = [*setup, point, grid_cell, *nb.cells[start + 1 : start + 2]]
    assert "read_frontier(" in nb.cells[-1].source
    return nb


def shown_markdown(cell) -> list[str]:
    return [o.data["text/markdown"] for o in cell.outputs if "text/markdown" in o.get("data", {})]


def test_the_needle_cells_compute_from_a_partial_file_and_say_what_is_missing(tmp_path):
    from app.lesson import needle
    from app.needle import claims, data, family, frontier, grid
    from h2o.needle import findings

    grid_lines = (data.RESULTS_DIR / data.GRID_FILE).read_text(encoding="utf-8").splitlines()
    front_lines = (data.RESULTS_DIR / data.FRONTIER_FILE).read_text(encoding="utf-8").splitlines()
    if len(grid_lines) < 4 or len(front_lines) < 3:
        pytest.skip("the shipped needle files are not in this copy")
    partial = tmp_path / "partial"
    partial.mkdir()
    # A run still going: the first lines of each, and a line cut off mid-write in the grid.
    half = grid_lines[: len(grid_lines) // 2]
    (partial / data.GRID_FILE).write_text("\n".join([*half, '{"row": "h2o']) + "\n")
    (partial / data.FRONTIER_FILE).write_text("\n".join(front_lines[:3]) + "\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    ran_partial, ran_empty = run(needle_notebook(partial)), run(needle_notebook(empty))

    for nb in (ran_partial, ran_empty):
        for cell in nb.cells:
            assert outputs(cell, "error") == [], cell.source[:80]
            assert [o.text for o in outputs(cell, "stream") if o.name == "stderr"] == []
    # Nothing to read: each cell says which file is not there, and draws nothing.
    *_, grid_cell, frontier_cell = ran_empty.cells
    for cell, name in ((grid_cell, data.GRID_FILE), (frontier_cell, data.FRONTIER_FILE)):
        assert f"{name} is not in this copy" in outputs(cell, "stream")[0].text
        assert not [
            o for o in cell.outputs if "application/vnd.plotly.v1+json" in o.get("data", {})
        ]

    # The partial files: the sentences are the app's own, on what the files hold now.
    cells = data.read_grid(partial / data.GRID_FILE).records
    rows = grid.rows(cells)
    shown = needle.lesson_rows(rows)
    ppl = frontier.ppl_points(data.read_frontier(partial / data.FRONTIER_FILE).records)
    acc = frontier.accuracy_points(cells, needle.LESSON_LENGTH)
    *_, grid_cell, frontier_cell = ran_partial.cells
    cells7 = [c for c in cells if c.length <= needle.LESSON_MAX_LENGTH]  # the chapter's lengths
    said = shown_markdown(grid_cell)[1:]
    since = family.family_sentences(cells7, needle.LESSON_BUDGET)
    assert len(said) == (2 if since else 1)
    if since:  # the family since H2O, the app's own sentences too
        assert said[1] == "\n\n".join(since)
    assert said[0].startswith(
        f"{claims.full_note(cells7)}\n\n"
        f"{claims.scores_sentence(grid.scores(cells7, shown), cells7)}\n\n"
        + claims.modes_sentence(cells7, "h2o@256:w50%", "h2o@256:w50%:prefill")
        + "\n\n"
        + claims.window_sweep_sentence(cells7, findings.sweep_rows(), findings.SWEEP_LENGTH)
        + "\n\nH2O runs here as its authors split the budget"
    )
    printed = "".join(o.text for o in outputs(grid_cell, "stream"))
    assert "1 line(s) skipped" in printed
    assert claims.shown_sentence(shown, rows, cells7) in printed
    verdicts = shown_markdown(frontier_cell)
    memory = frontier.default_memory(ppl)
    assert memory is not None and verdicts
    assert verdicts[0].startswith(claims.verdict(ppl, memory, claims.PERPLEXITY))
    acc_memory = frontier.default_memory(acc)
    if acc_memory is not None:
        said = claims.verdict(acc, acc_memory, claims.ACCURACY)
        assert verdicts[0].endswith(f"{said[0].lower()}{said[1:]}")
    assert (
        sum("application/vnd.plotly.v1+json" in o.get("data", {}) for o in frontier_cell.outputs)
        == 1
    )


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
