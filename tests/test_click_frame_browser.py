"""A click on the page does not frame the main area; the keyboard's focus still shows (Chromium).

The main area scrolls, so it takes the focus, from a click on its background as from Tab. Chromium
matches ``:focus-visible`` on whatever has the focus once a key is pressed, so a click and then the
player's arrow keys drew the main area's focus ring (ours, ``app/static/a11y.css``, and
Streamlit's own) round the whole page. The ring is the keyboard's only: ``app/a11y.py`` marks a
focus a pointer gave.
"""

from __future__ import annotations

import numpy as np
import pytest
from streamlit_server import PLAYER, needs_chromium, settle, wait_player
from test_a11y_keyboard import _FOCUSED, MIN_FOCUS_CONTRAST, Stop, _luminance, _shot, focus_seen
from test_browser import new_page

pytestmark = [pytest.mark.browser, needs_chromium]

Image = pytest.importorskip("PIL.Image")

SIZE = (1280, 720)
MAIN = '[data-testid="stMain"]'
#: The main area's frame as the browser computes it: our outline and Streamlit's (a shadow on its
#: ::before), and whether it has the focus.
_FRAME = f"""() => {{
  const m = document.querySelector('{MAIN}');
  const c = getComputedStyle(m), b = getComputedStyle(m, "::before");
  const r = m.getBoundingClientRect();
  return {{
    focused: document.activeElement === m, visible: m.matches(":focus-visible"),
    outline: c.outlineStyle, outlineWidth: parseFloat(c.outlineWidth) || 0,
    shadow: b.boxShadow, x: r.x, y: r.y, w: r.width, h: r.height,
  }};
}}"""


def framed_pixels(page, frame: dict) -> int:
    """Pixels along the main area's left edge that its focus changes at >= 3:1 (screenshotted
    focused, then blurred: the main area is left blurred)."""
    clip = {"x": frame["x"], "y": frame["y"] + 80, "width": 10, "height": 300}
    focused = _shot(page, clip)
    page.evaluate(f"() => document.querySelector('{MAIN}').blur()")
    blurred = _shot(page, clip)
    a, b = _luminance(focused), _luminance(blurred)
    ratio = (np.maximum(a, b) + 0.05) / (np.minimum(a, b) + 0.05)
    return int((ratio >= MIN_FOCUS_CONTRAST).sum())


def open_player(browser, server):
    ctx, page = new_page(browser, size=SIZE)
    page.goto(f"{server}/step-through")
    settle(page)
    wait_player(page)
    return ctx, page


def test_a_click_on_the_page_then_a_key_draws_no_frame(server, browser, tmp_path):
    ctx, page = open_player(browser, server)
    try:
        plot = page.locator(f"{PLAYER} .js-plotly-plot").first.bounding_box()
        page.mouse.click(plot["x"] + plot["width"] / 2, plot["y"] + plot["height"] / 2)
        frame = page.evaluate(_FRAME)
        # the page's background, right of the content: the main area takes the focus
        page.mouse.click(frame["x"] + frame["w"] - 30, frame["y"] + frame["h"] - 60)
        page.keyboard.press("ArrowRight")  # the player's key: Chromium now says focus-visible
        page.wait_for_timeout(300)
        frame = page.evaluate(_FRAME)
        page.screenshot(path=str(tmp_path / "after-click.png"))
        assert frame["focused"] and frame["visible"], frame  # the case the ring must not show in
        assert frame["outline"] == "none" and frame["shadow"] == "none", frame
        assert framed_pixels(page, frame) == 0
        # a second click, where the focus already is, changes nothing
        page.mouse.click(frame["x"] + frame["w"] - 30, frame["y"] + frame["h"] - 60)
        page.wait_for_timeout(200)
        frame = page.evaluate(_FRAME)
        assert frame["outline"] == "none" and frame["shadow"] == "none", frame
    finally:
        ctx.close()


def test_the_keyboards_focus_still_shows(server, browser):
    ctx, page = open_player(browser, server)
    try:
        frame = page.evaluate(_FRAME)
        page.mouse.click(frame["x"] + frame["w"] - 30, frame["y"] + frame["h"] - 60)
        assert page.evaluate(_FRAME)["focused"]
        page.keyboard.press("Tab")  # from the clicked main area to its first control
        page.wait_for_timeout(200)
        at = Stop(**page.evaluate(_FOCUSED))
        assert not at.sidebar and at.tag != "MAIN", at
        style = page.evaluate(
            "() => { const c = getComputedStyle(window.__h2oFocused.closest("
            "'[data-focus-visible]') || window.__h2oFocused); "
            "return [c.outlineStyle, parseFloat(c.outlineWidth) || 0]; }"
        )
        assert style[0] != "none" and style[1] >= 2, (at, style)
        got, need = focus_seen(page, at)
        assert got >= need, (at, got, need)
        page.keyboard.press("Shift+Tab")  # back to the main area, by the keyboard: framed
        page.wait_for_timeout(200)
        frame = page.evaluate(_FRAME)
        assert frame["focused"] and frame["visible"], frame
        assert frame["outline"] == "solid" and frame["outlineWidth"] >= 2, frame
        assert framed_pixels(page, frame) > 0
    finally:
        ctx.close()
