"""Chart text a lecture hall can read: every chart's text (title, ticks, axis titles, legends,
colour bars, notes) reaches WCAG's 4.5:1 on the chart's background in both themes, and in
presenter mode is at least 16 px (``app.charts.show``, the one place every page draws a chart).

Chart text takes Streamlit's placeholder for its theme's darkest text grey, which the browser
swaps for the theme's own colour (:data:`THEMED`, read from the installed Streamlit's bundle).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from app import charts
from app.figures import base
from app.state import PRESENTER
from tests.test_palette import MIN_CONTRAST, contrast, over, rgb, theme

MAIN = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
MIN_PRESENTER_PX = 16
#: What Streamlit's chart theme writes for its GRAY_90 placeholder: gray90 in the light theme,
#: gray10 in the dark (``getGray90`` in its frontend).
THEMED = {"light": "gray90", "dark": "gray10"}


def _palette() -> dict[str, str]:
    """The installed Streamlit frontend's grey palette (``gray90: `#262730```)."""
    import streamlit

    js = Path(streamlit.__file__).parent / "static" / "static" / "js"
    for f in sorted(js.glob("utils.*.js")):
        found = dict(re.findall(r"(gray\d+):`(#[0-9a-fA-F]{6})`", f.read_text(errors="ignore")))
        if "gray90" in found:
            return found
    raise AssertionError("no grey palette in Streamlit's frontend")


def test_the_placeholder_is_streamlits():
    from streamlit.elements.lib.streamlit_plotly_theme import GRAY_90

    assert base.TEXT_COLOUR == GRAY_90


@pytest.mark.parametrize("base_theme", ["light", "dark"])
def test_chart_text_contrast(base_theme):
    """The chart text colour on the page (the paper) and on the plot area in both themes."""
    text = rgb(_palette()[THEMED[base_theme]])
    page = theme(base_theme)["backgroundColor"]
    alpha = float(re.fullmatch(r"rgba\(128,128,128,([\d.]+)\)", base.PLOT_BG).group(1))
    for where, bg in {"paper": rgb(page), "plot area": over("#808080", alpha, page)}.items():
        assert contrast(text, bg) >= MIN_CONTRAST, (base_theme, where, contrast(text, bg))


def text_fonts(layout: dict, data: list[dict]) -> list[tuple[str, dict]]:
    """(where, font) of every piece of chart text a figure's layout sets (and its colour bars)."""
    fonts = [("font", layout.get("font", {}))]
    if "title" in layout:
        fonts.append(("title", layout["title"].get("font", {})))
    for name, value in layout.items():
        if re.fullmatch(r"[xy]axis\d*", name):
            fonts += [(f"{name} ticks", value.get("tickfont", {}))]
            fonts += [(f"{name} title", value.get("title", {}).get("font", {}))]
        elif re.fullmatch(r"legend\d*", name):
            fonts.append((name, value.get("font", {})))
        elif re.fullmatch(r"coloraxis\d*", name):
            bar = value.get("colorbar", {})
            fonts += [(f"{name} ticks", bar.get("tickfont", {}))]
            fonts += [(f"{name} title", bar.get("title", {}).get("font", {}))]
    fonts += [(f"note {a.get('text')!r}", a.get("font", {})) for a in layout.get("annotations", ())]
    for i, tr in enumerate(data):
        if tr.get("colorbar"):
            fonts += [(f"trace {i} colour bar", tr["colorbar"].get("tickfont", {}))]
    return fonts


def check(spec: dict, presenter: bool) -> list[str]:
    bad = []
    layout = spec["layout"]
    for where, font in text_fonts(layout, spec.get("data", [])):
        if font.get("color") != base.TEXT_COLOUR:
            bad.append(f"{where}: colour {font.get('color')}")
        if presenter and (font.get("size") or 0) < MIN_PRESENTER_PX:
            bad.append(f"{where}: {font.get('size')} px")
    if presenter:
        for px in re.findall(r"font-size:\s*([\d.]+)px", layout.get("title", {}).get("text", "")):
            if float(px) < MIN_PRESENTER_PX:
                bad.append(f"subtitle: {px} px")
        for name, value in layout.items():
            if re.fullmatch(r"[xy]axis\d*", name) and not value.get("automargin"):
                bad.append(f"{name}: no automargin")
    return bad


def _figure(subtitle: str = "over the steps"):
    layout = base.base_layout("A chart", 400, "step", "share", subtitle=subtitle)
    layout["xaxis2"] = {"title": {"text": "x2"}, "tickfont": {"size": 11}}
    layout["coloraxis"] = {"colorbar": {"title": {"text": "slots"}}}
    layout["annotations"] = [{"text": "a note", "font": {"size": 12}, "showarrow": False}]
    data = [{"type": "scatter", "x": [1, 2], "y": [3, 4], "name": "H2O"}]
    data.append({"type": "heatmap", "z": [[1, 2]], "colorbar": {"title": {"text": "score"}}})
    return base.make_figure(data, layout)


@pytest.mark.parametrize("presenter", [False, True])
def test_show_makes_every_text_readable_and_leaves_the_shared_figure(presenter):
    fig = _figure()
    before = json.dumps(fig.to_dict(), default=str, sort_keys=True)
    shown = charts.readable(fig, presenter).to_dict()
    assert check(shown, presenter) == []
    assert json.dumps(fig.to_dict(), default=str, sort_keys=True) == before
    assert charts.readable(fig, presenter) is charts.readable(fig, presenter)


@pytest.mark.parametrize("page", ["views/lesson.py", "views/all_policies.py"])
def test_every_chart_a_page_shows_in_presenter_mode(page):
    at = AppTest.from_file(MAIN, default_timeout=180)
    at.session_state[PRESENTER] = True
    at.run()
    if page != "views/lesson.py":
        at.switch_page(page).run()
    assert not at.exception, [e.value for e in at.exception]
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert specs
    bad = {s["layout"]["title"]["text"][:40]: check(s, presenter=True) for s in specs}
    assert not any(bad.values()), bad


def test_a_y_title_longer_than_its_plot_goes_on_two_lines_in_presenter_mode():
    long = "retained mass (mean over t ≥ budget)"
    layout = base.base_layout("A chart", 220, "step", long)
    data = [{"type": "scatter", "x": [1, 2], "y": [3, 4], "name": "H2O"}]
    fig = base.make_figure(data, layout)
    assert charts.readable(fig, False).layout.yaxis.title.text == long
    assert charts.readable(fig, True).layout.yaxis.title.text.replace("<br>", " ") == long
    assert "<br>" in charts.readable(fig, True).layout.yaxis.title.text
