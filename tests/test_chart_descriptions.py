"""A chart's description on the server (``app/charts.py``): a hidden paragraph of escaped plain
text after the chart, naming it by its key, and one linker component a page. Chromium's reading
of them is ``tests/test_a11y_browser.py``."""

from __future__ import annotations

import html
from pathlib import Path

from streamlit.testing.v1 import AppTest

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")


def _page(describe: object) -> AppTest:
    def script(describe) -> None:
        import plotly.graph_objects as go

        from app import charts

        fig = go.Figure(layout={"title": {"text": "Mass <b>&</b> recall"}})
        charts.show(fig, key="mass_chart", describe=describe)

    at = AppTest.from_function(script, args=(describe,))
    at.run()
    assert not at.exception, at.exception
    return at


def test_the_sentences_follow_the_chart_as_escaped_plain_text():
    at = _page(["**Heavy** hitters <script>alert(1)</script>", "", "x_y & z"])
    (chart,) = at.get("plotly_chart")
    (box,) = at.get("html")
    body = box.proto.body
    assert body == (
        '<p class="h2o-chart-description" id="h2o-description-mass_chart" '
        'data-chart="mass_chart" hidden>'
        f"<span>{html.escape('Heavy hitters <script>alert(1)</script>')}</span> "
        "<span>x_y &amp; z</span></p>"
    )
    assert "<script>" not in body
    assert chart.proto.id.endswith("-mass_chart")  # the key the linker looks the chart up by


def test_a_chart_with_nothing_to_say_has_a_name_only():
    at = _page([])
    assert len(at.get("plotly_chart")) == 1 and not at.get("html")


def test_every_page_has_one_linker():
    at = AppTest.from_file(MAIN, default_timeout=180)
    at.run()
    for file in ("views/all_policies.py", "views/how_it_works.py"):
        at.switch_page(file).run()
        assert not at.exception, at.exception
        linkers = [
            c
            for c in at.get("bidi_component")
            if c.proto.component_name == "h2o_chart_descriptions"
        ]
        assert len(linkers) == 1, file
