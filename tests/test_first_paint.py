"""Every page's first figure before the rest (``app/painted.py``): a page's first run in a
session ends below its first figure, with the reporter that tells the server the browser has
painted it; the report draws the whole page, the same page a run drawn whole shows."""

from __future__ import annotations

import pytest
from lesson_browser import report_painted
from streamlit.testing.v1 import AppTest

from app import painted
from app.pages import HOW_IT_WORKS, LESSON, PAGES, STEP_THROUGH

#: Pages without the call: the lesson draws chapter 1 first its own way; Step through's one
#: figure is the player, at the bottom; How it works has no chart.
WHOLE = {LESSON, STEP_THROUGH, HOW_IT_WORKS}
SHORT = [p for p in PAGES if p.file not in WHOLE]
WAIT = "The rest of this page is on its way…"


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
    from pathlib import Path

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
def test_a_pages_first_run_ends_below_its_first_figure_until_the_browser_reports_it(
    spec, monkeypatch
):
    assert painted.SHORT_FIRST_RUN  # the marker leaves the app as a browser gets it
    at = _open(spec.file)
    charts, texts = _seen(at)
    assert WAIT in [c.value for c in at.caption]
    assert len(_reporters(at)) == 1 and _reporters(at)[0].endswith(f"-{spec.url_path}_painted")
    if spec.file != "views/stale_spike.py":  # its first figure is the player (a component)
        assert charts >= 1

    report_painted(at, f"{spec.url_path}_painted")
    assert not at.exception, at.exception
    assert WAIT not in [c.value for c in at.caption] and not _reporters(at)
    charts_after, texts_after = _seen(at)
    assert texts_after[: len(texts)] == texts  # the top is unchanged on screen
    assert (charts_after, len(texts_after)) > (charts, len(texts))
    at.run()  # later runs of the page in the session draw it whole at once
    assert not _reporters(at) and _seen(at) == (charts_after, texts_after)

    monkeypatch.setattr(painted, "SHORT_FIRST_RUN", False)  # what every other test sees
    assert _seen(_open(spec.file)) == (charts_after, texts_after)
