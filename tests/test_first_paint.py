"""Every page's first figure before the rest (``app/painted.py``): a page's first run in a
session ends below its first figure, with the reporter that tells the server the browser has
painted it; the report draws the rest of the page, and the page is then the one a run drawn whole
shows. In a browser the report reruns the reporter's fragment alone: the server draws the top
once."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from lesson_browser import report_painted
from streamlit.testing.v1 import AppTest

from app import painted
from app.pages import HOW_IT_WORKS, LESSON, PAGES, STEP_THROUGH

sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))  # last: not app/
from hall_client import Run, Session
from streamlit.proto.WidgetStates_pb2 import WidgetState

#: Pages without the call: Step through's one figure is the player, at the bottom; How it works
#: has no chart.
WHOLE = {STEP_THROUGH, HOW_IT_WORKS}
SHORT = [p for p in PAGES if p.file not in WHOLE]
#: What the first run shows where the rest will be: the lesson names its chapters.
WAIT = {LESSON: "Chapters 2 to 10 are on their way…"}


def _open(file: str) -> AppTest:
    """``file`` opened from the menu (the router runs first: pages link to each other)."""
    at = AppTest.from_file("../app/main.py", default_timeout=180)
    at.run()
    at.switch_page(file).run()
    assert not at.exception, at.exception
    return at


def _seen(at: AppTest) -> tuple[int, list[str]]:
    """The page's charts, and its headings and paragraphs in document order."""
    texts: list[str] = []

    def walk(node) -> None:
        if getattr(node, "type", "") in ("title", "header", "subheader", "markdown"):
            texts.append(node.value)
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    return len(at.get("plotly_chart")), texts


def _reporters(at: AppTest) -> list[str]:
    return [c.proto.id for c in at.get("bidi_component") if c.proto.id.endswith("_painted")]


def test_every_page_with_charts_after_its_first_draws_that_one_first():
    import ast

    calls = {}
    for p in PAGES:
        tree = ast.parse((Path(__file__).parents[1] / "app" / p.file).read_text("utf-8"))
        for node in ast.walk(tree):
            f = getattr(node, "func", None)
            if isinstance(node, ast.Call) and getattr(f, "attr", "") == "first_figure_first":
                calls[p.file] = node.args[0].value  # type: ignore[attr-defined]
    assert calls == {p.file: p.url_path for p in SHORT}


@pytest.mark.first_paint
@pytest.mark.parametrize("spec", SHORT, ids=[p.url_path for p in SHORT])
@pytest.mark.slow
def test_a_pages_first_run_ends_below_its_first_figure_until_the_browser_reports_it(
    spec, monkeypatch
):
    assert painted.SHORT_FIRST_RUN  # the marker leaves the app as a browser gets it
    at = _open(spec.file)
    charts, texts = _seen(at)
    wait = WAIT.get(spec.file, painted.WAITING)
    assert wait in [c.value for c in at.caption]
    assert len(_reporters(at)) == 1 and _reporters(at)[0].endswith(f"-{spec.url_path}_painted")
    if spec.file != "views/stale_spike.py":  # its first figure is the player (a component)
        assert charts >= 1

    report_painted(at, f"{spec.url_path}_painted")
    assert not at.exception, at.exception
    assert wait not in [c.value for c in at.caption] and not _reporters(at)
    charts_after, texts_after = _seen(at)
    assert texts_after[: len(texts)] == texts  # the top is unchanged on screen
    assert (charts_after, len(texts_after)) > (charts, len(texts))
    at.run()  # later runs of the page in the session draw it whole at once
    assert not _reporters(at) and _seen(at) == (charts_after, texts_after)

    monkeypatch.setattr(painted, "SHORT_FIRST_RUN", False)  # what every other test sees
    assert _seen(_open(spec.file)) == (charts_after, texts_after)


@pytest.mark.first_paint
def test_the_lessons_table_waits_for_its_first_chart():
    """Chapter 1's table comes after its chart, folded: its code (Streamlit's data grid, the
    largest module a page loads after plotly.js) starts in the browser once the chart is
    painted, not beside it."""
    at = _open(LESSON)
    assert len(at.get("plotly_chart")) >= 1 and not at.dataframe
    report_painted(at, "lesson_painted")
    assert not at.exception, at.exception
    assert len(at.dataframe) >= 1


# -- in a browser: the report reruns the fragment, not the page ---------------------------------
def _shown(run: Run) -> list[tuple[str, str]]:
    """A run's elements as they read: type, and text or id."""
    return [
        (t, getattr(el, "body", "") or getattr(el, "text", "") or getattr(el, "id", ""))
        for t, el in run.elements
    ]


@pytest.mark.browser  # a live server, like the browser tests
def test_the_report_draws_only_the_rest_and_the_page_is_whole(server):
    """What a browser sends (the protocol client's report carries the reporter's fragment): the
    run it starts draws the rest alone, below a top drawn once, and the two read as the page a
    later visit draws whole."""

    async def visit() -> dict[str, tuple[list, list, list, str]]:
        s = Session(server)
        try:
            await s.open("/step-through")
            out = {}
            for spec in SHORT:
                first = await s.page(spec.title)
                (reporter,) = [
                    el
                    for t, el in first.elements
                    if t == "bidi_component" and el.id.endswith("_painted")
                ]
                rest = await s.painted(first)
                assert rest is not None
                whole = await s.page(spec.title)
                out[spec.file] = (
                    _shown(first),
                    _shown(rest),
                    _shown(whole),
                    first.fragments.get(reporter.id, ""),
                )
            return out
        finally:
            await s.close()

    asyncio.run(visit())  # the server computes what a first lecture computes (progress bars)
    for file, (first, rest, whole, fragment) in asyncio.run(visit()).items():
        assert fragment, f"{file}: the reporter is not in a fragment"
        top = [e for e in first if e[0] != "bidi_component" or not e[1].endswith("_painted")]
        assert top[-1] == ("markdown", WAIT.get(file, painted.WAITING))
        top = top[:-1]
        assert top[0] not in rest, f"{file}: the top drawn again"
        assert top + rest == whole, file


@pytest.mark.browser  # a live server, like the browser tests
def test_a_control_of_the_rest_changed_before_a_full_run_runs_the_whole_page(server):
    """Right after the report, the rest's controls sit in the fragment: changing one reruns only
    the fragment in a browser, but the page's top and its link may depend on it, so the whole
    page runs (the needle grid's cell: its row, in the rest)."""

    async def change_a_row() -> tuple[Run, str]:
        s = Session(server)
        try:
            await s.open("/step-through")
            first = await s.page("The needle grid")
            rest = await s.painted(first)
            assert rest is not None and not rest.exceptions
            box = next(el for t, el in rest.elements if t == "selectbox" and el.label == "Row")
            other = next(o for o in box.options if o != box.options[box.default])
            w = WidgetState(id=box.id, string_value=other)
            run = await s.rerun(
                page_hash=s.page_hash,
                fragment_id=rest.fragments[box.id],
                widgets={**s.widgets, box.id: w},
            )
            return run, other
        finally:
            await s.close()

    run, other = asyncio.run(change_a_row())
    assert not run.exceptions and not run.errors
    texts = [getattr(el, "body", "") for t, el in run.elements if t == "heading"]
    assert "The needle grid" in texts  # the top ran too: a run of the whole page
    (row,) = [el for t, el in run.elements if t == "selectbox" and el.label == "Row"]
    assert row.options[row.default] == other or row.raw_value == other  # the change is kept
