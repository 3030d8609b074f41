"""Presenter mode's clicker never drives a control: in Chromium, the keys a clicker sends (→ / ←,
PageDown / PageUp) after a click on a control.

* A question's option picked with the mouse (chapter 3): each key moves the chapter, and the
  answer is the one picked when the lecturer comes back (still marked right).
* The budget slider dragged with the mouse (chapter 6): each key moves the chapter, and the
  slider shows the value it was dragged to until the chapter is gone.
* A keyboard user (Tab to the option or the slider): → is the control's, as everywhere — it picks
  the next option or the next budget, and the chapter stays; PageDown, the clicker's own key,
  still moves the chapter and leaves the control as it is.

What a control shows is watched every frame from before the key to the moment the chapter is
gone (``_WATCH``): a control that took the key and then lost the page still fails.
"""

from __future__ import annotations

import re

import pytest
from streamlit_server import needs_chromium, settle, wait_ready
from test_browser import new_page, query

import h2o
from app.lesson import chapters_1_3, chapters_4_6
from h2o import analysis, explain

pytestmark = [pytest.mark.browser, needs_chromium]

sync_api = pytest.importorskip("playwright.sync_api")

VIEWPORT = (1280, 720)
#: The clicker's keys and where each moves: one chapter on, or one back.
KEYS = {"ArrowRight": 1, "PageDown": 1, "ArrowLeft": -1, "PageUp": -1}
BACK = {1: "ArrowLeft", -1: "ArrowRight"}
#: The chapter with the "which position is evicted" question, and the one with the budget slider.
HEAVY = next(c.number for c in chapters_1_3.CHAPTERS if c.draw is chapters_1_3.heavy_hitters)
FAMILY = next(c.number for c in chapters_4_6.CHAPTERS if c.draw is chapters_4_6.family)
QUESTION = ".st-key-lesson_q_heavy"
SLIDER = ".st-key-lesson_family_budget"


def heavy_answer() -> str:
    """Chapter 3's right answer, as the chapter computes it: the first victim of H2O on the toy
    trace at the trace's suggested settings."""
    trace = h2o.builtin_trace("toy")
    fit = analysis.suggested(trace)
    rep = h2o.replay(
        h2o.H2O(fit["budget"], recent_window=fit["recent_window"]), trace, fit["top_k"]
    )
    return str(explain.heavy_facts(trace, rep).victim)


#: What a control shows (its options' checked marks, a slider's value), recorded every frame
#: from now until the control leaves the page: ``window.__h2oWatch.seen`` lists every state it
#: showed other than the first.
_WATCH = """(sel) => {
  const state = () => {
    const box = document.querySelector(sel);
    return box && [...box.querySelectorAll("input")].map((i) =>
      i.type === "radio" ? (i.checked ? "x" : "-") : i.getAttribute("aria-valuetext")).join(" ");
  };
  const w = (window.__h2oWatch = { first: state(), seen: [] });
  const tick = () => {
    const now = state();
    if (now === null) return;  // the control is gone with its chapter
    if (now !== w.first && !w.seen.includes(now)) w.seen.push(now);
    requestAnimationFrame(tick);
  };
  tick();
  return w.first;
}"""


def heading(page, chapter: int):
    return page.get_by_role("heading", name=re.compile(rf"^{chapter}\. "))


def open_chapter(page, server: str, chapter: int) -> None:
    page.goto(f"{server}/?presenter=1&chapter={chapter}")
    heading(page, chapter).wait_for(timeout=60_000)
    ready(page)


def ready(page) -> None:
    """The script idle, the page still, and the keys bound (their component mounts a moment after
    the script finishes)."""
    settle(page, quiet=1.0)
    page.wait_for_function(
        "document.documentElement.dataset.h2oChapterKeys === 'bound'", timeout=30_000
    )


def focus_in(page, sel: str) -> bool:
    return page.evaluate("(sel) => document.activeElement.closest(sel) !== null", sel)


def press_and_watch(page, key: str, sel: str, chapter: int) -> tuple[int, list[str]]:
    """Press ``key`` with the focus on the control ``sel`` of ``chapter``; wait until the
    chapter has changed or the control has shown something else. Returns the chapter shown
    once the script is idle, and every state the control showed after the key."""
    assert focus_in(page, sel), f"the focus is elsewhere, not on {sel}"
    page.evaluate(_WATCH, sel)
    page.keyboard.press(key)
    try:
        page.wait_for_function(
            """([sel, chapter]) => window.__h2oWatch.seen.length > 0
                || !document.querySelector(sel)
                || ![...document.querySelectorAll("h2")].some((h) =>
                     h.innerText.startsWith(chapter + ". "))""",
            arg=[sel, chapter],
            timeout=30_000,
        )
    except sync_api.TimeoutError:
        raise AssertionError(
            f"{key} did nothing in 30 s: chapter {chapter} stayed, {sel} as it was"
        ) from None
    seen = page.evaluate("window.__h2oWatch.seen")
    wait_ready(page)
    shown = page.evaluate(
        """() => { const h = [...document.querySelectorAll("[data-testid=stMain] h2")]
                     .find((e) => /^\\d+\\. /.test(e.innerText));
                   return h ? parseInt(h.innerText, 10) : 0; }"""
    )
    return shown, seen


def back(page, delta: int, chapter: int) -> None:
    """The opposite key, from the page (the control no longer has the focus): back to
    ``chapter``."""
    ready(page)
    page.keyboard.press(BACK[delta])
    heading(page, chapter).wait_for(timeout=60_000)
    ready(page)


# -- a mouse, then the clicker ---------------------------------------------------------------------
@pytest.mark.parametrize("key", KEYS)
def test_a_question_answered_with_the_mouse_keeps_its_answer_as_the_clicker_moves(
    server, browser, key
):
    right, delta = heavy_answer(), KEYS[key]
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        open_chapter(page, server, HEAVY)
        page.locator(QUESTION).get_by_text(right, exact=True).click()
        verdict = page.locator(".st-key-lesson_predict_heavy [data-testid=stAlertContentSuccess]")
        verdict.wait_for(timeout=60_000)
        ready(page)
        shown, seen = press_and_watch(page, key, QUESTION, HEAVY)
        assert seen == [], f"{key} changed the answer: {seen}"
        assert shown == HEAVY + delta, f"{key}: chapter {shown}, not {HEAVY + delta}"
        assert query(page)["chapter"] == str(HEAVY + delta)
        back(page, delta, HEAVY)
        assert page.locator(f"{QUESTION} input:checked").count() == 1, "no answer is picked"
        assert page.locator(f"{QUESTION} label:has(input:checked)").inner_text() == right
        assert verdict.count() == 1, "the answer is no longer marked right"
    finally:
        ctx.close()


def drag(page, sel: str, fraction: float) -> None:
    """Drag the slider's thumb by ``fraction`` of its track, with the mouse."""
    box = page.locator(sel)
    track = box.get_by_test_id("stSliderTickBar").locator("xpath=..").bounding_box()
    thumb = box.get_by_test_id("stSliderThumbValue").locator("xpath=..").bounding_box()
    assert track is not None and thumb is not None
    x, y = thumb["x"] + thumb["width"] / 2, thumb["y"] + thumb["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + fraction * track["width"], y, steps=8)
    page.mouse.up()


def slider_value(page) -> str:
    return page.locator(f"{SLIDER} input[type=range]").get_attribute("aria-valuetext")


@pytest.mark.parametrize("key", KEYS)
def test_a_slider_dragged_with_the_mouse_keeps_its_value_as_the_clicker_moves(server, browser, key):
    delta = KEYS[key]
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        open_chapter(page, server, FAMILY)
        before = slider_value(page)
        # A quarter of the track, towards the end with room: the value changes, so the drag took.
        drag(page, SLIDER, 0.25 if before != str(chapters_4_6.BUDGETS[-1]) else -0.25)
        page.wait_for_function(
            "([sel, v]) => document.querySelector(sel + ' input[type=range]')"
            ".getAttribute('aria-valuetext') !== v",
            arg=[SLIDER, before],
            timeout=30_000,
        )
        ready(page)
        dragged = slider_value(page)
        shown, seen = press_and_watch(page, key, SLIDER, FAMILY)
        assert seen == [], f"{key} moved the slider from {dragged} to {seen}"
        assert shown == FAMILY + delta, f"{key}: chapter {shown}, not {FAMILY + delta}"
        assert query(page)["chapter"] == str(FAMILY + delta)
    finally:
        ctx.close()


# -- the keyboard's own arrows ---------------------------------------------------------------------
def tab_to(page, sel: str, limit: int = 120) -> None:
    for _ in range(limit):
        page.keyboard.press("Tab")
        if focus_in(page, sel):
            return
    raise AssertionError(f"Tab never reached {sel}")


@pytest.mark.parametrize(("chapter", "sel"), [(HEAVY, QUESTION), (FAMILY, SLIDER)])
def test_a_control_reached_with_tab_keeps_its_arrow_keys(server, browser, chapter, sel):
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        open_chapter(page, server, chapter)
        tab_to(page, sel)
        shown, seen = press_and_watch(page, "ArrowRight", sel, chapter)
        assert shown == chapter, f"→ on a control reached by Tab moved the page to {shown}"
        assert seen, "→ left the control reached by Tab as it was"
        ready(page)
        assert heading(page, chapter).count() == 1, "the chapter moved after the control's rerun"
        assert query(page)["chapter"] == str(chapter)
        assert focus_in(page, sel), "the control lost the keyboard's focus"
        # PageDown is the clicker's own key: it moves the chapter from the focused control too.
        shown, seen = press_and_watch(page, "PageDown", sel, chapter)
        assert seen == [], f"PageDown changed the control reached by Tab: {seen}"
        assert shown == chapter + 1, f"PageDown: chapter {shown}, not {chapter + 1}"
    finally:
        ctx.close()
