"""Presenter mode on a projector, and the step view's exported file.

In Chromium at 1280×720 (``browser`` tests), every chapter is opened once in presenter mode, and
checked on that page:

* Its first figure shows whole, without scrolling, with the sidebar collapsed. A chapter whose
  first figure waits behind a "predict" question is checked after "Just show me" (clicked where
  it is, so it must be on the screen too): the question and its answer sit beside the figure.
  Screenshots go to ``/tmp/presenter_chN.png``.
* It fits the screen whole with its "More: …" expander shut: the main area (Streamlit's scroller,
  not the document) scrolls not at all — its question, figure and answer and the navigation after
  them are on one screen; a chapter whose "predict" question holds back its figure is measured
  before "Just show me" and after.
* axe-core and the charts' names and descriptions, before any answer is revealed, as
  ``tests/test_a11y_browser.py`` checks every view (its :func:`audit` and
  :func:`charts_say_what_they_show`).
* Its clicker keys are bound, and PageDown moves on to the next chapter.

Without a browser: the exported HTML file opens at the view's step, or at the first eviction when
the view is at step 0 (where nothing has happened yet), in a range of steps that holds it —
those are ``tests/test_stepper_export.py``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import pytest
import test_a11y_browser as a11y
from streamlit_server import needs_chromium, settle, shown_step, wait_player, wait_ready
from test_browser import new_page

from app.needle import frontier as needle_frontier
from h2o.needle import results as needle_results

VIEWPORT = (1280, 720)
#: The lesson's chapters (``app.lesson.chapters()``; not imported here, to keep collection light).
CHAPTERS = 10
#: The chapter's first figure, where it is not a plotly chart: chapter 9 is the card's two lists
#: side by side, chapter 10 the commands that load a policy (its first code block). Chapter 8's
#: is the frontier's chart, or, in a copy without a usable ``traces/results/frontier.jsonl``,
#: the notice that says so.
FIRST_FIGURE = {9: '[data-testid="stHorizontalBlock"]', 10: '[data-testid="stCode"]'}
_FRONTIER = needle_results.read_frontier(needle_results.RESULTS_DIR / needle_results.FRONTIER_FILE)
if not needle_frontier.ppl_points(_FRONTIER.records):
    FIRST_FIGURE[8] = '[data-testid="stAlert"]'

CHART = ".stPlotlyChart"
CHAPTER = ".st-key-lesson_chapter"


def settled_box(page, locator, tries: int = 40) -> dict[str, float]:
    """The element's bounding box once two reads 250 ms apart agree: the sidebar slides shut and
    plotly re-lays out its chart to the wider page after the first paint."""
    last = None
    for _ in range(tries):
        box = locator.bounding_box()
        if box is not None and box == last:
            return box
        last = box
        page.wait_for_timeout(250)
    raise AssertionError(f"the figure kept moving: last box {last}")


#: The main area's overflow: Streamlit's main block scrolls (``stMain``), the document does not;
#: its expanders, to check that every "More: …" is shut; what overflows, for the message.
_OVERFLOW = """() => {
  const main = document.querySelector('[data-testid=stMain]');
  const bottom = main.getBoundingClientRect().bottom;
  const below = [...document.querySelectorAll(
      '.st-key-lesson_chapter > *, [data-testid=stMainBlockContainer] > div > div > *')]
    .filter((e) => e.getBoundingClientRect().bottom > bottom + 1)
    .map((e) => (e.innerText || e.className).trim().slice(0, 60).replace(/\\s+/g, ' '));
  return {
    scroll: main.scrollHeight, client: main.clientHeight,
    open: [...main.querySelectorAll('[data-testid=stExpander] details')]
      .filter((d) => d.open).map((d) => d.innerText.slice(0, 40)),
    more: [...main.querySelectorAll('[data-testid=stExpander] summary')]
      .map((s) => s.innerText.trim()).filter((t) => t.includes('More:')),
    below,
  };
}"""

#: Does the chapter's first figure wait behind its question? Decided by document order: a chapter
#: may open on a figure and ask a question further down (chapter 4).
_PREDICTED = """([figure, chapter]) => {
  const first = document.querySelector(figure);
  const button = [...document.querySelectorAll(chapter + ' button')]
    .find((b) => b.innerText.trim() === 'Just show me');
  return !first
    || Boolean(button.compareDocumentPosition(first) & Node.DOCUMENT_POSITION_FOLLOWING);
}"""

#: How far the main area (Streamlit's scroller) and the document are scrolled.
_SCROLLED = """() => [document.querySelector('[data-testid=stMain]').scrollTop,
                      document.scrollingElement.scrollTop]"""


def heading(page, chapter: int):
    return page.get_by_role("heading", name=re.compile(rf"^{chapter}\. "))


def keys_bound(page) -> None:
    """The chapter's clicker keys are bound (their component mounts after the script finishes:
    wait for the page to settle first)."""
    page.wait_for_function(
        "document.documentElement.dataset.h2oChapterKeys === 'bound'", timeout=30_000
    )


@contextlib.contextmanager
def noted(problems: list[str]) -> Iterator[None]:
    """A check that fails is noted, and the chapter's other checks still run."""
    try:
        yield
    except AssertionError as e:
        problems.append(str(e))


def fits(page, chapter: int, when: str, problems: list[str]) -> None:
    """The main area scrolls not at all, with every "More: …" shut."""
    page.wait_for_timeout(500)  # plotly's relayout to the page's width
    got = page.evaluate(_OVERFLOW)
    page.screenshot(path=f"/tmp/presenter_fit_ch{chapter}{when.replace(' ', '_')}.png")
    print(f"chapter {chapter}{when}: {got['scroll']} px of {got['client']}, {got['more']}")
    if got["open"]:
        problems.append(f"chapter {chapter}{when}: opened {got['open']}")
    if got["scroll"] > got["client"]:
        problems.append(
            f"chapter {chapter}{when}: {got['scroll'] - got['client']} px below the "
            f"{got['client']} px screen ({got['scroll']} px tall): {got['below']}"
        )


def first_figure_on_screen(page, chapter: int, selector: str, predicted: bool) -> None:
    """The chapter's first figure is whole on the screen, nothing scrolled, the sidebar shut."""
    figure = page.locator(selector).first
    figure.wait_for(timeout=60_000)
    if chapter not in FIRST_FIGURE:
        figure.locator(".main-svg").first.wait_for(timeout=60_000)
    box = settled_box(page, figure)
    sidebar = settled_box(page, page.get_by_test_id("stSidebar"))
    page.screenshot(path=f"/tmp/presenter_ch{chapter}.png")
    top, bottom = box["y"], box["y"] + box["height"]
    print(
        f"chapter {chapter}: first figure {top:.0f}–{bottom:.0f} px"
        + (" (after 'Just show me')" if predicted else "")
    )
    scrolled = page.evaluate(_SCROLLED)
    assert scrolled == [0, 0], f"chapter {chapter}: scrolled (main, document) {scrolled} px"
    assert sidebar["x"] + sidebar["width"] <= 0, f"the sidebar is open: {sidebar}"
    assert box["height"] > 60, box  # a figure, not an empty frame
    assert top >= 0, f"chapter {chapter}: the figure starts {-top:.0f} px above the screen"
    assert bottom <= VIEWPORT[1], (
        f"chapter {chapter}: the figure ends {bottom - VIEWPORT[1]:.0f} px below the "
        f"{VIEWPORT[1]} px screen (top {top:.0f}, bottom {bottom:.0f})"
    )


# -- presenter mode at 1280×720 --------------------------------------------------------------------
@pytest.mark.browser
@needs_chromium
@pytest.mark.parametrize("chapter", range(1, CHAPTERS + 1))
def test_each_chapter_on_a_projector_screen(server, browser, chapter):
    """The chapter opened once, every check made on that page (the module's docstring); every
    failure is reported, not only the first."""
    ctx, page = new_page(browser, size=VIEWPORT)
    problems: list[str] = []
    try:
        page.goto(f"{server}/?presenter=1&chapter={chapter}")
        wait_ready(page)
        heading(page, chapter).wait_for(timeout=60_000)
        # Presenter mode collapses the sidebar after the first paint; measure nothing before
        # (with the sidebar open the text is narrower, taller, and pushes the button down).
        page.wait_for_function(
            "document.querySelector('[data-testid=stSidebar]').dataset.collapsed === 'true'",
            timeout=30_000,
        )
        # Decide only once the chapter has stopped growing (a slow machine mounts a chart a moment
        # after the script reports idle).
        a11y.settle(page)
        keys_bound(page)
        selector = f"{CHAPTER} {FIRST_FIGURE.get(chapter, CHART)}"
        reveal = page.locator(CHAPTER).get_by_role("button", name="Just show me")
        asks = reveal.count() > 0
        predicted = asks and page.evaluate(_PREDICTED, [selector, CHAPTER])
        fits(page, chapter, " before 'Just show me'" if asks else "", problems)
        with noted(problems):
            if predicted:
                # The figure waits behind the question: the question is on the screen, and the
                # figure its click reveals must be too (clicked where it is, nothing scrolled).
                button = settled_box(page, reveal.first)
                assert button["y"] + button["height"] <= VIEWPORT[1], (
                    f"chapter {chapter}: 'Just show me' is {button['y'] - VIEWPORT[1]:.0f} px "
                    "below the screen"
                )
            else:
                first_figure_on_screen(page, chapter, selector, predicted)
        # axe-core and the accessibility tree, before any answer is revealed.
        view = f"presenter-{chapter}"
        with noted(problems):
            a11y.audit(page, view)
        with noted(problems):
            a11y.charts_say_what_they_show(page, view)
        if page.viewport_size != {"width": VIEWPORT[0], "height": VIEWPORT[1]}:
            # The audit made the viewport as tall as a chapter that overflows: back to the screen.
            page.set_viewport_size({"width": VIEWPORT[0], "height": VIEWPORT[1]})
            a11y.settle(page)
        if asks:
            reveal.first.click()
            wait_ready(page)
            settle(page)
            if predicted:
                with noted(problems):
                    first_figure_on_screen(page, chapter, selector, predicted)
            fits(page, chapter, " after 'Just show me'", problems)
        if chapter < CHAPTERS:
            # The clicker's key moves on to the next chapter.
            keys_bound(page)
            page.evaluate("document.activeElement && document.activeElement.blur()")
            page.keyboard.press("PageDown")
            heading(page, chapter + 1).wait_for(timeout=120_000)
    finally:
        print("\n".join(problems))  # shown with any error that cut the checks short
        ctx.close()
    assert not problems, "\n".join(problems)


@pytest.mark.browser
@needs_chromium
def test_the_collapsed_sidebar_opens_again_and_moves_chapters(server, browser):
    ctx, page = new_page(browser, size=VIEWPORT)
    try:
        page.goto(f"{server}/?presenter=1&chapter=2")
        wait_ready(page)
        page.wait_for_function(
            "document.querySelector('[data-testid=stSidebar]').dataset.collapsed === 'true'",
            timeout=30_000,
        )
        page.get_by_test_id("stExpandSidebarButton").click()
        nav = page.get_by_test_id("stSidebar").get_by_role("button", name="6. The family")
        nav.click()
        page.get_by_role("heading", name="6. The family").wait_for(timeout=60_000)
        wait_ready(page)
        assert page.get_by_test_id("stSidebar").get_attribute("data-collapsed") == "false"
    finally:
        ctx.close()


@pytest.mark.browser
@needs_chromium
def test_a_view_at_step_0_exports_a_file_that_opens_at_the_first_eviction(
    server, browser, tmp_path
):
    ctx, page = new_page(browser)
    try:
        page.goto(f"{server}/step-through?trace=toy&budget=8&recent_window=2&step=0")
        wait_player(page)
        assert shown_step(page) == 0
        with page.expect_download(timeout=60_000) as dl:
            page.get_by_role("button", name=re.compile("Download these steps as HTML")).click()
        path = tmp_path / "export.html"
        dl.value.save_as(path)
    finally:
        ctx.close()
    ctx, page = new_page(browser)
    try:
        page.goto(path.as_uri())
        wait_player(page)
        # A budget-8 cache is first over budget when position 8 arrives: step 8.
        assert shown_step(page) == 8
    finally:
        ctx.close()


# -- How it works: code blocks fit ---------------------------------------------------------------
@pytest.mark.browser
@needs_chromium
@pytest.mark.parametrize(
    ("size", "side_by_side"), [((1600, 900), False), ((1280, 720), False), ((2400, 1200), True)]
)
def test_how_it_works_shows_every_line_of_code_whole(server, browser, size, side_by_side):
    """No code block wraps a line (the library's signatures stay on one line) or clips one: the
    font shrinks to fit, no smaller than 12 px. The card (76 characters wide) and the library
    (98, with line numbers) sit side by side only where both fit at full size, about 1,600 px
    of page: not at 1600 px with the sidebar open."""
    ctx, page = new_page(browser, size=size)
    try:
        page.goto(f"{server}/how-it-works")
        wait_ready(page)
        page.get_by_text("The card's pseudocode").wait_for(timeout=60_000)
        blocks = page.locator('[data-testid="stCode"]')
        blocks.nth(2).wait_for(timeout=60_000)
        page.screenshot(path=f"/tmp/how_it_works_{size[0]}.png")
        fits = page.evaluate(
            """() => [...document.querySelectorAll('[data-testid="stCode"] pre')].map(pre => ({
                text: pre.innerText.split('\\n')[0],
                wrap: getComputedStyle(pre.querySelector('code')).whiteSpace,
                clipped: pre.scrollWidth - pre.clientWidth,
                font: parseFloat(getComputedStyle(pre.querySelector('code')).fontSize)}))"""
        )
        assert len(fits) >= 3, fits
        for f in fits:
            assert f["wrap"] == "pre", f
            assert f["clipped"] <= 0, f
            assert f["font"] >= 12, f
        card = page.locator(".st-key-hiw_card").bounding_box()
        lib = page.locator(".st-key-hiw_h2o").bounding_box()
        assert card is not None and lib is not None
        if side_by_side:
            assert lib["x"] > card["x"] + card["width"] and abs(lib["y"] - card["y"]) < 100
            assert all(f["font"] == 14 for f in fits[:2]), fits
        else:
            assert lib["y"] > card["y"] + card["height"]
    finally:
        ctx.close()
