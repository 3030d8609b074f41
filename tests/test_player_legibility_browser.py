"""The step-through player as a lecturer projects it, at 1280×720, in Chromium.

* Presenter mode: the first policy's detail heatmap — all of its plot area — is on the first
  screen of Step through, under the title and the step controls, with no scrolling; the view
  settings are a click away, and self-study keeps them in sight.
* A short trace's rows are tall enough to see (at least :data:`ROW_MIN_PX` each): a window of
  them that follows the step, the rest a drag away; a long trace's rows are as they were, every
  one in the plot.
* A score its policy's class declares a count (``score_counts``: Scissorhands' votes) is ticked
  in whole numbers only — the heatmaps' colour bars, the server's heatmap and the kept slots'
  axis — and a score that is no count keeps its decades. Few kept slots are each labelled.
* Eviction marks are sized to the rows: no two overlap, so each eviction can be seen.
"""

from __future__ import annotations

import re

import pytest
from streamlit_server import PLAYER, needs_chromium, settle, wait_player
from test_browser import new_page, wait_step

import h2o
from app import controls, data
from h2o.player import playback
from h2o.player.colours import ColourScale
from h2o.policies import H2O, Scissorhands, make_policy

pytestmark = [pytest.mark.browser, needs_chromium]

VIEWPORT = (1280, 720)
#: The least height (px) of a short trace's heatmap row a room can see.
ROW_MIN_PX = 8
WHOLE = re.compile(r"^\d+$")

#: Per detail heatmap: its plot area on screen, the y range shown, its length in px, its rows,
#: and the eviction marks' boxes on screen.
_DETAILS = """() => [...document.querySelectorAll('.h2o-player .h2o-detail .h2o-gd')].map((gd) => {
  const fl = gd._fullLayout;
  const box = (e) => { const b = e.getBoundingClientRect();
    return { x: b.x, y: b.y, w: b.width, h: b.height }; };
  return {
    area: box(gd.querySelector('.draglayer .xy .nsewdrag')),
    range: fl.yaxis.range.slice(),
    len: fl.yaxis._length,
    rows: gd.data[0].y.length,
    cbar: [...gd.querySelectorAll('.colorbar text')].map((t) => t.textContent)
      .filter((t) => /^[0-9.e+-]+$/.test(t)),
    marks: [...gd.querySelectorAll('.scatterlayer .points path')].map(box),
  };
})"""


def details(page) -> list[dict]:
    return page.evaluate(_DETAILS)


def open_player(page, url: str) -> None:
    page.goto(url)
    wait_player(page, plots=2)
    settle(page, quiet=1.0)
    page.wait_for_function(
        f"document.querySelectorAll('{PLAYER} .h2o-detail .draglayer .nsewdrag').length >= 2",
        timeout=60_000,
    )
    page.wait_for_timeout(500)  # a second fit of the rows, once plotly has drawn the legend


def spike_replays() -> dict[str, h2o.Replay]:
    """The Stale spike page's two replays, at the settings it takes from its trace."""
    ref = data.load("stale-spike", {})
    fit = controls.defaults(ref.trace)
    return {
        name: h2o.replay(
            make_policy(name, fit["budget"], recent_window=fit["recent_window"]),
            ref.trace,
            fit["top_k"],
        )
        for name in ("h2o", "scissorhands")
    }


# -- 1. presenter mode: the first heatmap on the first screen ------------------------------------
@pytest.mark.parametrize("path", ["step-through", "stale-spike"])
def test_presenter_mode_shows_the_first_heatmap_whole_on_the_first_screen(server, browser, path):
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        open_player(page, f"{server}/{path}?presenter=1")
        scrolled = page.evaluate("document.querySelector('[data-testid=stMain]').scrollTop")
        assert scrolled == 0
        area = details(page)[0]["area"]
        assert area["h"] > 300  # a heatmap, not a strip
        assert area["y"] >= 0 and area["y"] + area["h"] <= VIEWPORT[1], area
        assert area["x"] >= 0 and area["x"] + area["w"] <= VIEWPORT[0], area
        # The view settings wait behind a button in the bar, and open on a click.
        colour = page.locator(f"{PLAYER} .h2o-seg-btn", has_text="linear")
        assert not colour.is_visible()
        page.locator(f"{PLAYER} .h2o-settings summary").click()
        assert colour.is_visible()
    finally:
        ctx.close()


def test_self_study_keeps_the_view_settings_in_sight(server, browser):
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        open_player(page, f"{server}/step-through")
        assert page.locator(f"{PLAYER} .h2o-settings").count() == 0
        assert page.locator(f"{PLAYER} .h2o-seg-btn", has_text="linear").is_visible()
    finally:
        ctx.close()


# -- 2. a short trace's rows ---------------------------------------------------------------------
def test_a_short_traces_rows_are_tall_enough_and_follow_the_step(server, browser):
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        open_player(page, f"{server}/stale-spike")
        for d in details(page):
            lo, hi = d["range"]
            assert d["len"] / (hi - lo) >= ROW_MIN_PX, d  # px per row (one unit each)
            assert -0.5 <= lo < hi <= d["rows"] - 0.5  # a window of the rows
        page.locator(f"{PLAYER} .h2o-title").first.click()
        page.keyboard.press("End")  # the last step: its newest positions are the top rows
        wait_step(page, h2o.builtin_trace("stale-spike").steps - 1)
        page.wait_for_timeout(800)
        for d in details(page):
            lo, hi = d["range"]
            assert hi == pytest.approx(d["rows"] - 0.5) and d["len"] / (hi - lo) >= ROW_MIN_PX
    finally:
        ctx.close()


def test_a_long_traces_rows_are_all_in_the_plot(server, browser):
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        open_player(page, f"{server}/step-through?step=2000")
        for d in details(page):
            assert d["range"] == pytest.approx([-0.5, d["rows"] - 0.5])
            assert d["rows"] > 256  # the canonical trace's: thin rows, every one shown
    finally:
        ctx.close()


# -- 3. counts ticked in whole numbers -----------------------------------------------------------
def test_the_class_says_which_score_is_a_count():
    assert Scissorhands.declares("score_counts") is True
    assert not H2O.declares("score_counts")

    class Weighted(Scissorhands):  # another rule: it says for itself what it counts
        name = "weighted-votes"

    assert not Weighted.declares("score_counts")
    reps = spike_replays()
    assert [playback.counts(r) for r in reps.values()] == [False, True]


@pytest.mark.parametrize("hi", [1.0, 2.0, 17.0, 95.0, 4096.0])
def test_a_colour_scale_of_counts_is_ticked_in_whole_numbers(hi):
    for log in (True, False):
        ticks = ColourScale(hi, log=log, counts=True).ticks()
        assert ticks is not None and all(WHOLE.match(t) for t in ticks[1])
    if hi < 1000:  # a score that is no count keeps its decades below 1
        assert "0.1" in ColourScale(hi, log=True).colorbar("x")["ticktext"]


def test_votes_are_ticked_in_whole_numbers_and_every_slot_is_labelled(server, browser):
    reps = spike_replays()
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        open_player(page, f"{server}/stale-spike")
        step = int(page.get_attribute(PLAYER, "data-rendered"))
        h_detail, s_detail = details(page)
        assert s_detail["cbar"] and all(WHOLE.match(t) for t in s_detail["cbar"]), s_detail
        assert any(not WHOLE.match(t) for t in h_detail["cbar"])  # H2O's sums: decades
        # The browser's scale of votes is the server's (h2o/player/colours.py), tick for tick.
        hi, zmin, zmax = page.evaluate(
            f"(() => {{ const p = document.querySelector('{PLAYER}').__h2o;"
            " const gd = p.views[1].detail.gd;"
            " return [p.panels[1].meta.hi, gd._fullData[0].zmin, gd._fullData[0].zmax]; })()"
        )
        scale = ColourScale(hi, counts=True)
        assert s_detail["cbar"] == scale.colorbar("votes")["ticktext"]
        assert [zmin, zmax] == pytest.approx(scale.zrange())
        drawn = page.evaluate(
            f"document.querySelector('{PLAYER}').__h2o.views.map((v) => v.bars.chart.drawn)"
        )
        assert drawn[1]["yticks"] and all(WHOLE.match(t) for t in drawn[1]["yticks"]), drawn
        assert any(not WHOLE.match(t) for t in drawn[0]["yticks"])
        for rep, shown in zip(reps.values(), drawn, strict=True):
            pos, _ = rep.kept_at(step)
            assert shown["xlabels"] == [str(p) for p in pos]  # every slot, in order
        # The server's heatmap of Scissorhands on the canonical trace, further down the page.
        server_bar = page.locator(".st-key-canonical_scissorhands .colorbar text")
        server_bar.first.wait_for(timeout=60_000)
        ticks = [t for t in server_bar.all_text_contents() if re.match(r"^[0-9.e+-]+$", t)]
        assert ticks and all(WHOLE.match(t) for t in ticks), ticks
    finally:
        ctx.close()


# -- 4. eviction marks apart ---------------------------------------------------------------------
def overlapping(boxes: list[dict]) -> list[tuple[dict, dict]]:
    """Pairs of boxes that share more than a sliver (half a pixel each way)."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            dx = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
            dy = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
            if dx > 0.5 and dy > 0.5:
                out.append((a, b))
    return out


def test_eviction_marks_stay_apart(server, browser):
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        open_player(page, f"{server}/stale-spike?reveal=1")
        for d in details(page):
            area = d["area"]
            inside = [
                m
                for m in d["marks"]
                if area["y"] <= m["y"] and m["y"] + m["h"] <= area["y"] + area["h"]
            ]
            assert len(inside) >= 10, d["marks"]
            assert overlapping(inside) == []
    finally:
        ctx.close()
