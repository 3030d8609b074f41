"""The needle grid and Evict or compress? pages, and the lesson's chapters 7 and 8, under AppTest
on a fixture with the shipped files' schema (``test_claims_needle.write_fixture``, in a temporary
folder): what they draw is the data, the sentences shown are the claims' (which
``test_claims_needle`` checks against pandas), file strings are shown as plain text, an absent or
damaged file is a clear message, and "Recompute this cell" goes through the model queue."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest
from model_marks import needs_model
from page_text import said
from streamlit.testing.v1 import AppTest
from streamlit_server import needs_chromium, wait_ready
from test_browser import new_page
from test_claims_needle import (
    check_verdict,
    frontier_frames,
    positions_text,
    raw_frames,
    write_fixture,
)

from app import jobs, model_runs, state
from app.lesson import needle as lesson_needle
from app.needle import claims, frontier, grid, runs, shipped
from h2o.model.rows import Row
from h2o.needle import results as res

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
GRID_PAGE, EC_PAGE = "views/needle_grid.py", "views/evict_or_compress.py"


@pytest.fixture
def results(tmp_path, monkeypatch) -> Path:
    """The fixture's needle files, beside the shipped JSON results (the owl's answers)."""
    write_fixture(tmp_path)
    for f in res.RESULTS_DIR.glob("*.json"):
        if not f.name.endswith(".meta.json"):
            shutil.copy(f, tmp_path)
    monkeypatch.setattr(res, "RESULTS_DIR", tmp_path)
    return tmp_path


def open_page(page: str, **state: object) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=120)
    at.run()
    at.switch_page(page)
    for k, v in state.items():
        at.session_state[k] = v
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


def arr(v) -> np.ndarray:
    if isinstance(v, dict):
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        shape = v.get("shape")
        if isinstance(shape, str):
            shape = [int(s) for s in shape.split(",")]
        return a.reshape(shape) if shape else a
    return np.asarray(v, dtype=np.float64)


def markdown(at: AppTest) -> list[str]:
    """Every markdown element's text, and each paragraph of one that holds several."""
    return said(at)


# -- the needle grid -------------------------------------------------------------------------------
@pytest.mark.parametrize("metric", ["correct", "logprob"])
@pytest.mark.slow
def test_the_grid_draws_each_row_on_one_scale_and_says_what_it_shows(results, metric):
    at = open_page(GRID_PAGE, ng_metric=metric)
    g, _ = raw_frames(results)
    loaded = res.read_grid(results / res.GRID_FILE)
    cells = loaded.records
    shown = at.session_state["ng_rows"]
    # the page's defaults present in the fixture, then its first other rows (five in all)
    assert shown == ["full", "h2o@256:w50%", "kivi4", "h2o@64", "h2o@128"]
    spec = charts(at)["ng_heatmaps"]
    lens, deps = sorted(g.length.unique()), sorted(g.depth.unique())
    col = "correct" if metric == "correct" else "logprob"
    zs = []
    heat = [t for t in spec["data"] if t["type"] == "heatmap"]
    # click targets, one per panel (the other scatter traces print the cells' values)
    marks = [t for t in spec["data"] if t["type"] == "scatter" and t["mode"] != "text"]
    printed = [t for t in spec["data"] if t["type"] == "scatter" and t["mode"] == "text"]
    assert len(printed) == len(heat)
    for i, (tr, mark, row) in enumerate(zip(heat, marks, shown, strict=True)):
        computed = g[g.row == row][["length", "depth"]].drop_duplicates()
        assert sorted(tuple(c[:3]) for c in mark["customdata"]) == sorted(
            (i, int(n), int(d)) for n, d in computed.itertuples(index=False)
        )
        assert mark["marker"]["opacity"] == 0 and tr.get("hoverinfo") == "skip"
        mine = g[g.row == row].assign(v=lambda f: f[col].astype(float))
        want = mine.pivot_table(index="depth", columns="length", values="v", aggfunc="mean")
        want = want.reindex(index=deps, columns=lens).to_numpy()
        np.testing.assert_allclose(arr(tr["z"]), want, equal_nan=True)
        assert tr["coloraxis"] == "coloraxis"  # one colour scale for every panel
        zs.append(want)
    cax = spec["layout"]["coloraxis"]
    if metric == "correct":
        assert (cax["cmin"], cax["cmax"]) == (0, 1)
    else:
        assert (cax["cmin"], cax["cmax"]) == pytest.approx((np.nanmin(zs), np.nanmax(zs)))
    shown_md = markdown(at)
    assert claims.shown_sentence(shown, grid.rows(cells), cells, loaded.meta["rows"]) in shown_md
    assert claims.scores_sentence(grid.scores(cells, shown), cells) in shown_md
    assert claims.full_note(cells) in shown_md
    assert at.code[0].value == (
        "# 1 run, 2 min\npython -m h2o needle --rows full\n"
        "# 1 run, 0 min\npython -m h2o needle --rows kivi4"
    )
    assert any("2 min of wall time in all" in c.value for c in at.caption)
    table = at.dataframe[0].value.set_index("row")
    acc = g[g.row.isin(shown)].groupby("row").correct.mean()
    for row in shown:
        assert table.loc[row, "accuracy"] == pytest.approx(acc[row])


@pytest.mark.parametrize(
    ("points", "want"),
    [
        ([{"customdata": [1, 2048, 50, 0.5, 1]}], (1, 2048, 50)),
        ([{"customdata": [0.0, 512.0, 0]}], (0, 512, 0)),
        ([{"x": "512"}, {"customdata": [2, 1024, 25]}], (2, 1024, 25)),
        ([], None),
        (None, None),
        ("[1, 2, 3]", None),
        ([{"customdata": [3, 512, 0]}], None),  # no fourth panel
        ([{"customdata": [-1, 512, 0]}], None),
        ([{"customdata": [0.5, 512, 0]}], None),
        ([{"customdata": ["0", "512", "0"]}], None),
        ([{"customdata": [0, 512]}], None),
        (["not a point", 7], None),
    ],
)
def test_a_click_is_read_from_the_selection_and_nothing_else(points, want):
    assert grid.clicked(points, 3) == want


def test_other_rows_change_the_panels_and_the_sentences(results):
    rows = ["kivi8", "h2o@256+kivi4", "snapkv@128"]
    at = open_page(GRID_PAGE, ng_rows=rows)
    cells = res.read_grid(results / res.GRID_FILE).records
    spec = charts(at)["ng_heatmaps"]
    titles = [a["text"] for a in spec["layout"]["annotations"]]
    assert titles == rows
    assert claims.scores_sentence(grid.scores(cells, rows), cells) in markdown(at)
    assert "at lengths 512, 1,024, 2,048 and 4,096 tokens" in markdown(at)[2]


def test_a_cell_shows_its_strings_as_plain_text_and_what_each_layer_held(results):
    g, _ = raw_frames(results)
    wrong = g[(g.row == "h2o@128") & ~g.correct].iloc[0]
    at = open_page(
        GRID_PAGE,
        ng_cell_row="h2o@128",
        ng_cell_len=int(wrong.length),
        ng_cell_depth=int(wrong.depth),
        ng_n=wrong.needle,
    )
    texts = [t.value for t in at.text]
    assert wrong.question in texts and wrong.expected in texts
    assert wrong.produced in texts and "<b>" in wrong.produced  # as written, never as markup
    assert not any("<b>" in m for m in markdown(at))
    assert claims.held_sentence(wrong.held) in markdown(at)
    bars = charts(at)["ng_held"]["data"][0]
    np.testing.assert_allclose(arr(bars["y"]), wrong.held)
    assert any("(wrong, greedy)" in m for m in markdown(at))


def test_every_position_of_a_row_can_be_opened(results):
    g, _ = raw_frames(results)
    at = open_page(GRID_PAGE, ng_rows=["full", "kivi8"], ng_cell_row="kivi8")
    # kivi8 has only the two short lengths: the length box offers exactly those.
    lens = sorted(g[g.row == "kivi8"].length.unique())
    assert lens == [512, 1024]
    assert at.selectbox(key=state.wkey("ng_cell_len")).options == [str(n) for n in lens]
    for n in lens:
        for d in sorted(g[(g.row == "kivi8") & (g.length == n)].depth.unique()):
            at.session_state["ng_cell_len"], at.session_state["ng_cell_depth"] = n, d
            at.run()
            assert not at.exception, [e.value for e in at.exception]
            needle = at.session_state["ng_n"]
            want = g[(g.row == "kivi8") & (g.length == n) & (g.depth == d) & (g.needle == needle)]
            assert want.iloc[0].produced in [t.value for t in at.text]


def test_recompute_goes_through_the_model_queue(results, monkeypatch):
    seen = []

    def fake_run_cell(spec, load=None):
        seen.append((dict(spec), jobs.model_queue().running))
        return {"produced": " 9237. <i>x</i>", "correct": True, "logprob": -0.25}

    monkeypatch.setattr(runs, "run_cell_function", lambda: fake_run_cell)
    monkeypatch.setattr(model_runs, "model_path", lambda: Path("/dev/null"))
    runs.recompute.clear()
    at = open_page(GRID_PAGE, ng_cell_row="full", ng_cell_len=512, ng_cell_depth=50)
    assert seen == []  # nothing runs on page load
    at.button(key="ng_recompute").click().run()
    assert not at.exception, [e.value for e in at.exception]
    ((spec, running),) = seen
    cell = grid.at(res.read_grid(results / res.GRID_FILE).records, "full", 512, 50)[0]
    assert spec == {
        "row": "full",
        "length": 512,
        "depth": 50,
        "needle": cell.needle,
        "model": "/dev/null",  # the app's own model file
    }
    assert running is not None and "needle cell full" in running[0]  # it held the queue
    assert any("Recomputed on this server" in m and "log-prob -0.25" in m for m in markdown(at))
    assert "9237. <i>x</i>" in [t.value.strip() for t in at.text]


def test_without_run_cell_the_page_says_so(results, monkeypatch):
    monkeypatch.setattr(runs, "run_cell_function", lambda: None)
    at = open_page(GRID_PAGE)
    assert any("h2o.needle.cells.run_cell" in c.value for c in at.caption)
    assert all(b.key != "ng_recompute" for b in at.button)


def test_every_shipped_file_is_read_from_one_folder(results):
    """The JSON results and the attention band come from the folder the needle files do, each
    checked: a file taken away is gone from the pages, a band not of its schema is none."""
    name = "lighthouse-quality.json"
    assert model_runs.shipped_result(name) == json.loads((results / name).read_text())
    (results / name).unlink()
    assert model_runs.shipped_result(name) is None
    band = results / res.BAND_FILE
    band.write_text(json.dumps({"band": [3, 5], "warmup": 2}))
    assert shipped.attention_band() == {"band": [3, 5], "warmup": 2}
    for bad in ({"band": [0], "warmup": 2}, {"band": [3], "warmup": True}, [3, 5]):
        band.write_text(json.dumps(bad) + " " * len(str(bad)))  # another size: another version
        assert shipped.attention_band() is None, bad


def test_absent_and_damaged_files_are_clear_messages(tmp_path, monkeypatch):
    monkeypatch.setattr(res, "RESULTS_DIR", tmp_path)
    for page in (GRID_PAGE, EC_PAGE):
        at = open_page(page)
        assert any("is not in this copy" in i.value for i in at.info), page
        assert not at.get("plotly_chart")
    (tmp_path / res.GRID_FILE).write_text('{"row": 1}\nnot json\n')
    at = open_page(GRID_PAGE)
    (warning,) = at.warning
    assert "2 line(s) skipped" in warning.value and "line 1" in warning.value
    assert any("has no usable lines" in i.value for i in at.info)


def wilson_fraction_by_hand(p: float, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The Wilson score interval at a mean share ``p`` of ``n`` positions, written out."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def test_the_grid_table_gives_every_accuracy_its_count_and_interval(results):
    at = open_page(GRID_PAGE)
    (table,) = [d.value for d in at.dataframe if "accuracy" in d.value.columns]
    assert len(table)
    cells = res.read_grid(results / res.GRID_FILE).records
    for r in table.itertuples(index=False):
        assert r.accuracy == pytest.approx(r.right / r.cells)
        # the interval is over positions (a length and depth): Wilson on their number at the
        # mean share a position answered
        by: dict = {}
        for c in cells:
            if c.row == r.row:
                by.setdefault((c.length, c.depth), []).append(c.correct)
        mean = sum(sum(v) / len(v) for v in by.values()) / len(by)
        assert r.positions == len(by)
        low, high = wilson_fraction_by_hand(mean, len(by))
        assert r[table.columns.get_loc("95 % interval, low")] == pytest.approx(low, abs=1e-9)
        assert r[table.columns.get_loc("95 % interval, high")] == pytest.approx(high, abs=1e-9)


def test_evict_or_compress_table_gives_counts_intervals_and_needles(results):
    at = open_page(EC_PAGE)
    (table,) = [d.value for d in at.dataframe if "needle accuracy" in d.value.columns]
    cells = res.read_grid(results / res.GRID_FILE).records
    at_2048 = [c for c in cells if c.length == 2048]
    for r in table.dropna(subset=["needle accuracy"]).itertuples(index=False):
        mine = [c for c in at_2048 if c.row == r.row]
        text = r[table.columns.get_loc("needles answered (95 % interval over positions)")]
        assert text == positions_text({(c.depth, c.needle): c.correct for c in mine})
        per_depth = {}
        for c in mine:
            per_depth.setdefault(c.depth, set()).add(c.needle)
        assert r[table.columns.get_loc("needles a depth")] == min(map(len, per_depth.values()))


# -- Evict or compress? ----------------------------------------------------------------------------
@pytest.mark.slow
def test_the_frontier_draws_one_line_per_family_and_the_verdicts_at_every_rows_memory(results):
    fr = res.read_frontier(results / res.FRONTIER_FILE).records
    cells = res.read_grid(results / res.GRID_FILE).records
    ppl_frame, acc_frames = frontier_frames(results)
    ppl = frontier.ppl_points(fr)
    acc = frontier.accuracy_points(cells, 2048)
    at = open_page(EC_PAGE)
    choices = at.selectbox(key=state.wkey("ec_row")).options
    # every row that holds less than the whole cache, on either chart, by its bytes per token
    first_x = {}
    for frame in [ppl_frame, *(acc_frames[n] for n in sorted(acc_frames, reverse=True))]:
        for r, g, x in zip(frame.row, frame.group, frame.x, strict=True):
            if g not in ("full", "select"):
                first_x.setdefault(r, x)
    assert choices == sorted(first_x, key=lambda r: (first_x[r], r))
    assert at.session_state["ec_row"] == "kivi4"  # the paper's 4-bit cache
    spec = charts(at)["ec_ppl"]
    families = [t["name"] for t in spec["data"] if t["name"] != "full cache"]
    families = [n for n in families if not n.startswith("bar: ")]  # the legend's bar entry
    assert families == list(frontier.lines(ppl))
    _, f = raw_frames(results)
    f = f[(f.tokens == 2048) & (f.family != "full cache")]
    # each row named by its kind today, its recent window said (the file's "H2O" was window 32),
    # an allocation as the app names it
    want = set()
    for row, alloc in zip(f.row, f.allocation, strict=True):
        fam = Row.parse(row).family
        if alloc == "pyramid":
            fam = fam.replace(" (pyramid)", "") + ", pyramid (PyramidKV-style)"
        want.add(fam)
    assert sorted(families) == sorted(want)
    assert "H2O, window 32" in families and "H2O" not in families
    # each point at its mean over the texts against the full cache on the same text, its bar
    # from its lowest to its highest (the frame's, by pandas)
    by_row = ppl_frame.set_index("row")
    for tr in spec["data"]:
        if tr["name"].startswith("bar: "):
            continue
        if tr["name"] == "full cache":
            assert arr(tr["y"]).tolist() == [0.0]
            continue
        rows = [t.split(": ", 1)[0] for t in tr["text"]]
        want_y = by_row.loc[rows, "y"].to_numpy()
        np.testing.assert_allclose(arr(tr["y"]), want_y)
        np.testing.assert_allclose(arr(tr["error_y"]["array"]), by_row.loc[rows, "hi"] - want_y)
        np.testing.assert_allclose(
            arr(tr["error_y"]["arrayminus"]), want_y - by_row.loc[rows, "lo"]
        )
    assert "tokens of 3 texts" in spec["layout"]["title"]["text"]
    names = [tr.get("name") for tr in spec["data"]]
    assert "bar: range over 3 texts" in names
    g, _ = raw_frames(results)
    part = g[g.length == 2048]
    outcomes = {
        r: {(d, nd): bool(ok) for d, nd, ok in zip(c.depth, c.needle, c.correct, strict=True)}
        for r, c in part.groupby("row")
    }
    for row in choices:
        at.session_state["ec_row"] = row
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        shown = markdown(at)
        infos = [i.value for i in at.info]
        # each chart is read at the row's own bytes on it, or says the row is not on it
        on_ppl = ppl_frame[ppl_frame.row == row]
        if len(on_ppl):
            memory = round(float(on_ppl.x.iloc[0]))
            text = claims.verdict(ppl, memory, claims.PERPLEXITY)
            assert text in shown
            check_verdict(text, ppl_frame, memory, True)
            line = [s for s in charts(at)["ec_ppl"]["layout"]["shapes"] if s.get("showlegend")]
            assert [s["x0"] for s in line] == [memory]
        else:
            assert any(i.startswith(f"{row} is not on the perplexity chart") for i in infos)
        on_acc = acc_frames[2048][acc_frames[2048].row == row]
        if len(on_acc):
            memory = round(float(on_acc.x.iloc[0]))
            text = claims.verdict(acc, memory, claims.ACCURACY)
            assert text in shown
            check_verdict(text, acc_frames[2048], memory, False, outcomes)
        else:
            assert any(i.startswith(f"{row} is not on the needle chart") for i in infos)


@pytest.mark.parametrize("length", [512, 1024, 2048, 4096])
@pytest.mark.slow
def test_the_accuracy_chart_and_verdict_at_every_length(results, length):
    cells = res.read_grid(results / res.GRID_FILE).records
    _, acc_frames = frontier_frames(results)
    at = open_page(EC_PAGE, ec_length=length)
    frame = acc_frames[length]
    memory = round(float(frame[frame.row == "kivi4"].x.iloc[0]))  # the default row's own bytes
    acc = frontier.accuracy_points(cells, length)
    text = claims.verdict(acc, memory, claims.ACCURACY)
    assert text in markdown(at)
    check_verdict(text, frame, memory, False)
    spec = charts(at)["ec_acc"]
    ys = {tr["name"]: arr(tr["y"]) for tr in spec["data"] if tr["name"] != "full cache"}
    for fam, pts in frontier.lines(acc).items():
        want = [frame.set_index("row").loc[p.row, "y"] for p in pts]
        np.testing.assert_allclose(ys[fam], want)


# -- the lesson ------------------------------------------------------------------------------------
def open_chapter(n: int) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=300)
    at.query_params["presenter"], at.query_params["chapter"] = "1", str(n)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_chapter_7_shows_the_needle_grid_and_keeps_the_owl(results):
    at = open_chapter(7)
    cells = res.read_grid(results / res.GRID_FILE).records
    rows = lesson_needle.lesson_rows(grid.rows(cells))
    # the fixture has neither H2O prefill mode nor snapkv@256
    assert rows == ["full", "h2o@256:w50%", "streaming-llm@256"]
    cells = [c for c in cells if c.length <= lesson_needle.LESSON_MAX_LENGTH]
    spec = charts(at)["lesson_needle"]
    assert [a["text"] for a in spec["layout"]["annotations"]] == rows
    shown = markdown(at)
    assert claims.scores_sentence(grid.scores(cells, rows), cells) in shown
    assert claims.full_note(cells) in shown
    assert any("as an anecdote" in m for m in shown)
    assert any("**prefill mode**" in m for m in shown)
    assert len(shown[0]) < 250  # presenter mode: a short paragraph before the first figure


def test_chapter_8_reads_the_frontier_at_kivi4s_memory(results):
    at = open_chapter(8)
    assert [h.value for h in at.header if h.value[:1].isdigit()] == ["8. Evict or compress?"]
    fr = res.read_frontier(results / res.FRONTIER_FILE).records
    cells = res.read_grid(results / res.GRID_FILE).records
    ppl = frontier.ppl_points(fr)
    memory = round(next(p for p in ppl if p.row == "kivi4").x)
    shown = markdown(at)
    assert claims.verdict(ppl, memory, claims.PERPLEXITY) in shown
    acc = frontier.accuracy_points(cells, 2048)
    acc_memory = round(next(p for p in acc if p.row == "kivi4").x)  # its own bytes at 2,048
    assert acc_memory != memory  # the fixture's prompts are a little short of their length
    said = claims.verdict(acc, acc_memory, claims.ACCURACY)
    assert f"On the needle grid at 2,048 tokens: {said[0].lower()}{said[1:]}" in shown
    assert "lesson_frontier" in charts(at)
    assert len(shown[0]) < 250


def test_chapter_8_says_how_the_shipped_charts_rows_run_over_a_text():
    """On the shipped frontier: the stepped one-shot methods and Quest's reads, as the page."""
    at = open_chapter(8)
    fr = res.read_frontier(res.RESULTS_DIR / res.FRONTIER_FILE).records
    notes = claims.text_notes(fr, [p.row for p in frontier.ppl_points(fr)])
    assert len(notes) == 2 and notes[1].startswith("A selection evicts nothing")
    shown = markdown(at)
    assert all(note in shown for note in notes)


def test_chapters_7_and_8_without_the_files(tmp_path, monkeypatch):
    monkeypatch.setattr(res, "RESULTS_DIR", tmp_path)
    for n in (7, 8):
        at = open_chapter(n)
        assert any("is not in this copy" in i.value for i in at.info), n


def test_a_failing_recompute_is_an_error_and_changes_nothing(results, monkeypatch):
    def refuse(spec, load=None):
        raise ValueError("row 'full': <b>no</b> such thing")

    monkeypatch.setattr(runs, "run_cell_function", lambda: refuse)
    monkeypatch.setattr(model_runs, "model_path", lambda: Path("/dev/null"))
    runs.recompute.clear()
    at = open_page(GRID_PAGE)
    before = [t.value for t in at.text]
    at.button(key="ng_recompute").click().run()
    assert not at.exception, [e.value for e in at.exception]
    (err,) = at.error
    assert err.value.startswith("The cell was not recomputed: ") and "\\<b\\>" in err.value
    assert [t.value for t in at.text] == before
    assert at.session_state["_ng_fresh"] == {}


def test_the_librarys_run_cell_is_the_one_the_page_calls():
    cells = pytest.importorskip("h2o.needle.cells")
    assert runs.run_cell_function() is cells.run_cell


@pytest.mark.parametrize("page", [GRID_PAGE, EC_PAGE])
def test_every_chart_is_titled_valid_and_small(results, page):
    at = open_page(page)
    for key, spec in charts(at).items():
        assert spec["layout"]["title"]["text"], key
        assert spec["layout"]["xaxis"]["title"]["text"], key
        assert spec["layout"]["yaxis"]["title"]["text"], key
    sizes = [len(c.proto.spec.encode()) for c in at.get("plotly_chart")]
    assert sizes and max(sizes) <= 1_500_000


@needs_model
def test_recompute_a_cell_with_the_model(results):
    """The real ``run_cell`` through the page: the fixture's full-cache cell at 512 tokens, 0 %,
    the green locker (a real needle: its code is 9237)."""
    runs.recompute.clear()
    at = open_page(
        GRID_PAGE, ng_rows=["full"], ng_cell_row="full", ng_cell_len=512, ng_cell_depth=0
    )
    at.session_state["ng_n"] = "green-locker"
    at.run()
    at.button(key="ng_recompute").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    ((key, got),) = at.session_state["_ng_fresh"].items()
    assert key == ("full", 512, 0, "green-locker")
    assert got["expected"] == "9237" and got["row"] == "full" and got["held"] is None
    assert any("Recomputed on this server" in m for m in markdown(at))


def test_no_row_chosen_asks_for_one_and_unknown_rows_fall_back(results):
    at = open_page(GRID_PAGE, ng_rows=[])
    assert any("Choose at least one row" in i.value for i in at.info)
    assert not at.get("plotly_chart")
    at = open_page(GRID_PAGE, ng_rows=["tova@999"])
    assert at.session_state["ng_rows"] == ["full", "h2o@256:w50%", "kivi4", "h2o@64", "h2o@128"]


def test_a_frontier_without_a_full_cache_row_at_2048_tokens_says_so(results):
    path = results / res.FRONTIER_FILE
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines if r["tokens"] != 2048))
    at = open_chapter(8)
    assert any("The frontier file has no row at 2,048 tokens." in i.value for i in at.info)
    at = open_page(EC_PAGE)
    assert any("The frontier file has no row at 2,048 tokens." in i.value for i in at.info)
    assert "ec_ppl" not in charts(at) and "ec_acc" in charts(at)
    # rows at 2,048 tokens, but none of the full cache (nor its 16-bit KIVI-style equal):
    # nothing to put them against
    path.write_text(
        "".join(
            json.dumps(r) + "\n"
            for r in lines
            if r["text"] == "lighthouse.txt" and r["kind"] != "full" and r["bits"] != 16
        )
    )
    at = open_page(EC_PAGE)
    said = "lighthouse.txt: 14 rows at 2,048 tokens but no full-cache row to put them against"
    assert any(said in i.value for i in at.info)
    assert "ec_ppl" not in charts(at)


@pytest.mark.parametrize("kept", [("lighthouse.txt",), ("library.txt", "orchard.txt")])
@pytest.mark.slow
def test_the_perplexity_chart_reads_one_or_two_texts(results, kept):
    """The file as a run leaves it with one text, or two: the chart, its verdict and its notes
    count the texts it has; on one text no bar is drawn."""
    path = results / res.FRONTIER_FILE
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines if r["text"] in kept))
    fr = res.read_frontier(path).records
    ppl = frontier.ppl_points(fr)
    ppl_frame, _ = frontier_frames(results)
    assert set(ppl_frame.n) <= {1, len(kept)} and ppl_frame.n.max() == len(kept)
    at = open_page(EC_PAGE)
    spec = charts(at)["ec_ppl"]
    memory = round(next(p for p in ppl if p.row == "kivi4").x)
    text = claims.verdict(ppl, memory, claims.PERPLEXITY)
    assert text in markdown(at)
    check_verdict(text, ppl_frame, memory, True)
    title = spec["layout"]["title"]["text"]
    names = [tr.get("name") for tr in spec["data"]]
    captions = [c.value for c in at.caption]
    assert any(claims.texts_note(fr, ppl) in c for c in captions)
    bars = [tr["error_y"]["visible"] for tr in spec["data"] if "error_y" in tr]
    if len(kept) == 1:
        assert "tokens of lighthouse.txt" in title and not any(bars)
        assert not any(str(n).startswith("bar: ") for n in names)
        assert any("one measurement a row, no range" in c for c in captions)
    else:
        assert "tokens of 2 texts" in title and any(bars)
        assert "bar: range over 2 texts" in names


# -- in Chromium, on the shipped files (whatever part of them this copy has) -----------------------
#: The visible buttons and labels whose text is cut: by their own width, or by the first
#: ancestor that clips (a column too narrow for a segmented control).
CUT_CONTROLS = """() => [...document.querySelectorAll(
    '[data-testid="stMain"] button, [data-testid="stMain"] label')]
  .filter(b => b.offsetParent !== null)
  .filter(b => {
    if (b.scrollWidth > b.clientWidth + 1) return true;
    const r = b.getBoundingClientRect();
    for (let a = b.parentElement; a; a = a.parentElement) {
      if (getComputedStyle(a).overflowX !== 'visible') {
        const c = a.getBoundingClientRect();
        return r.right > c.right + 1 || r.left < c.left - 1;
      }
    }
    return false;
  })
  .map(b => b.innerText || b.getAttribute('aria-label'))"""


@pytest.mark.browser
@needs_chromium
@pytest.mark.parametrize(
    ("path", "heading", "loaded", "charts"),
    [
        ("needle-grid", "The needle grid", res.read_grid, 1),
        ("evict-or-compress", "Evict or compress?", res.read_frontier, 1),
    ],
)
def test_the_pages_render_in_a_browser(server, browser, path, heading, loaded, charts):
    """At a projector's 1280x720: the page renders, and no control's text is cut."""
    ctx, page = new_page(browser, size=(1280, 720))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{server}/{path}")
        wait_ready(page)
        page.get_by_role("heading", name=heading).first.wait_for(timeout=60_000)
        name = res.GRID_FILE if loaded is res.read_grid else res.FRONTIER_FILE
        if loaded(res.RESULTS_DIR / name).records:
            page.wait_for_function(
                f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {charts}",
                timeout=60_000,
            )
        else:
            assert (
                page.get_by_text("is not in this copy").count()
                or page.get_by_text("has no usable lines").count()
            )
        page.screenshot(path=f"/tmp/{path}.png", full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0
        cut = page.evaluate(CUT_CONTROLS)
        assert cut == [], f"truncated controls at 1280x720: {cut}"
        assert not errors, errors
    finally:
        ctx.close()


@pytest.mark.browser
@needs_chromium
def test_clicking_a_heatmap_cell_opens_it_below(server, browser):
    """A click on the second panel's cell at the longest length and the middle depth opens that
    row, length and depth under "One cell"; a click on another cell then opens that one."""
    cells = res.read_grid(res.RESULTS_DIR / res.GRID_FILE).records
    if not cells:
        pytest.skip("this copy has no shipped needle grid")
    ctx, page = new_page(browser, size=(1280, 900))
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{server}/needle-grid")
        wait_ready(page)
        page.wait_for_function(
            "document.querySelectorAll('.js-plotly-plot .nsewdrag').length >= 2", timeout=60_000
        )
        defaults = ["full", "h2o@256:w50%", "h2o@256:w50%:prefill", "snapkv@256", "kivi4"]
        shown = grid.pick(grid.rows(cells), defaults, 5)  # the page's defaults, as the page picks
        lens, deps = grid.lengths(cells), grid.depths(cells)

        def click(panel: int, k: int, d: int, n_lens: int) -> None:
            sub = "xy" if panel == 0 else f"x{panel + 1}y{panel + 1}"
            box = page.locator(f'.js-plotly-plot .nsewdrag[data-subplot="{sub}"]').first
            box.scroll_into_view_if_needed()
            b = box.bounding_box()
            x = b["x"] + b["width"] * (k + 0.5) / n_lens
            y = b["y"] + b["height"] * (d + 0.5) / len(deps)
            page.mouse.move(x, y)  # plotly.js picks the point on hover (throttled)
            page.wait_for_timeout(300)
            page.mouse.click(x, y)

        def opened() -> list[str]:
            return page.evaluate(
                """() => [...document.querySelectorAll('[data-testid="stSelectbox"] input')]
                    .map(i => i.value)"""
            )

        # The cells the page drew (its click targets), whatever the file held when it read it.
        marks = page.evaluate(
            """() => document.querySelector('.js-plotly-plot').data
                .filter(t => t.type === 'scatter' && t.mode !== 'text').map(t => t.customdata)"""
        )
        drawn_lens = sorted({int(m[1]) for ms in marks for m in ms})
        assert lens[: len(drawn_lens)] == drawn_lens
        for panel, at_depth in ((1, len(deps) // 2), (3, 0)):
            longest = max(int(m[1]) for m in marks[panel] if int(m[2]) == deps[at_depth])
            k, d = drawn_lens.index(longest), at_depth
            click(panel, k, d, len(drawn_lens))
            want = [shown[panel], str(longest), f"{deps[d]} %"]
            for _ in range(60):  # the rerun the click starts
                if opened()[:3] == want:
                    break
                page.wait_for_timeout(500)
            assert opened()[:3] == want
        assert not errors, errors
    finally:
        ctx.close()


def test_evict_or_compress_says_which_methods_have_no_perplexity():
    """On the shipped files: the methods of the needle grid that compress a prompt once and have
    no closed loop are named under the perplexity chart, and the ones the chart runs stepped are
    named as stepped, as the claims compute them from the two files."""
    at = open_page(EC_PAGE)
    fr = res.read_frontier(res.RESULTS_DIR / res.FRONTIER_FILE).records
    gr = res.read_grid(res.RESULTS_DIR / res.GRID_FILE).records
    charted = [p.row for p in frontier.ppl_points(fr)]
    want = claims.one_shot_note(gr, charted)
    assert want.startswith("SnapKV compresses a prompt once")
    stepped = claims.stepped_note(charted)
    assert stepped.startswith("K-norm, KVzip and Expected Attention compress a prompt once")
    reads = claims.read_note(fr, charted)
    assert reads.startswith("A selection evicts nothing: it holds every key")
    shown = said(at)
    assert want in shown and stepped in shown and reads in shown


# -- provenance: one click away, each command once -------------------------------------------------
def test_a_sidecars_commands_are_listed_once_with_their_runs_and_wall_time():
    meta = {
        "runs": [
            {"command": "python -m h2o needle --rows a --out /tmp/x.jsonl", "wall_seconds": 60},
            {"command": "python -m h2o needle --rows b --out traces/results/g.jsonl"},
            {
                "command": "python -m h2o needle --rows b --out traces/results/g.jsonl",
                "wall_seconds": 120.0,
            },
            {
                "command": "python -m h2o needle --rows b --out traces/results/g.jsonl",
                "wall_seconds": float("nan"),
            },
            "not a run",
            {"command": 7, "wall_seconds": 5},
        ]
    }
    a, b = res.commands(meta)
    assert (a.runs, a.wall, a.out) == (1, 60.0, "/tmp/x.jsonl")
    assert (b.runs, b.wall, b.out) == (3, 120.0, "traces/results/g.jsonl")
    script = shipped.provenance_script([a, b], "g.jsonl").splitlines()
    assert script == [
        "# 1 run, 1 min; wrote /tmp/x.jsonl, whose lines were copied into g.jsonl",
        a.text,
        "# 3 runs, 2 min",
        b.text,
    ]
    said_ = shipped.provenance_caption([a, b])
    assert said_.startswith("Computed ahead by 2 distinct commands in 4 runs, 3 min of wall time")
    assert "resumed" in said_
    assert "resumed" not in shipped.provenance_caption([a])
    assert res.commands(None) == [] and res.commands({"runs": "x"}) == []


@pytest.mark.parametrize("page", [GRID_PAGE, EC_PAGE])
def test_the_shipped_commands_sit_collapsed_once_per_figure(page):
    """Every command line on the page is inside a collapsed "How … was computed" expander, and
    no command is printed twice in one of them (the shipped sidecars repeat a resumed command)."""
    at = open_page(page)
    boxes = [e for e in at.expander if e.label.startswith("How the ")]
    assert boxes, "no provenance expander"
    inside = {id(c.proto) for e in boxes for c in e.code}
    commands = [c for c in at.code if "python -m h2o" in c.value]
    assert commands and all(id(c.proto) in inside for c in commands)
    for e in boxes:
        assert not e.proto.expanded
        for c in e.code:
            lines = [s for s in c.value.splitlines() if not s.startswith("#")]
            assert len(lines) == len(set(lines))


def test_the_grid_prints_short_cell_values_in_rows_tall_enough():
    """Four-character labels ("100%") ran together across a panel's narrow cells: a share is
    printed in percent without its sign, the colour bar says the unit, and the figure grows with
    the number of depths so each row keeps its height."""
    from app import figures
    from app.figures.needle import ROW_PX

    depths = list(range(0, 100, 5))  # 20 depths
    z = np.full((len(depths), 3), 2 / 3)
    z[0, 0], z[1, 1] = 1.0, 0.0
    fig = figures.needle_heatmaps(
        panels=[("a", z, np.ones_like(z)), ("b", z, np.ones_like(z))],
        lengths=[512, 1024, 2048],
        depths=depths,
        zrange=(0.0, 1.0),
        colour_title="share answered right",
        value_format=".0%",
        title="t",
    ).to_plotly_json()
    texts = [t for t in fig["data"] if t["type"] == "scatter" and t.get("mode") == "text"]
    labels = {s for t in texts for s in t["text"]}
    assert labels == {"100", "0", "67"}
    cax = fig["layout"]["coloraxis"]["colorbar"]
    assert cax["tickformat"] == ".0%" and "(cells in %)" in cax["title"]["text"]
    m = fig["layout"]["margin"]
    assert (fig["layout"]["height"] - m["t"] - m["b"]) / len(depths) >= ROW_PX - 2
