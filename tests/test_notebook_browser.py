"""The lesson notebook in a live JupyterLab, driven in real Chromium.

A JupyterLab server on a free port, with a token, over a temporary root holding a copy of
``notebooks/lesson.ipynb`` and one cell this test appends (a student's policy with a bug).
Chromium opens it, runs every cell through JupyterLab's Run menu and checks what a student sees:
every player renders both panels; → moves a player's step with no message on the kernel's
websocket (watched frame by frame); the policy the lesson defines in a cell plays in its player;
the broken policy's cell shows a clear error and no player; nothing is fetched from a network;
axe-core finds no serious or critical violation inside the players, whose charts are named and
described in the accessibility tree.
"""

from __future__ import annotations

import time

import pytest
from lab_server import (
    MARIMO_NOTEBOOK,
    code_cell,
    jupyterlab_missing,
    lesson,
    marimo_missing,
    open_notebook,
    run_all,
    serve_lab,
    serve_marimo,
)
from streamlit_server import PLAYER, needs_chromium

import h2o
from h2o.player import constants

pytestmark = [pytest.mark.browser, needs_chromium]

BROKEN = """\
class Broken(ScoredPolicy):
    name = "broken-in-a-cell"
    label = "Broken"

    def _accumulate(self, score, attn):
        raise RuntimeError("my rule has a bug")


Player(trace, Broken, "h2o", budget=budget)"""
PLAYERS = f"[...document.querySelectorAll('{PLAYER}')]"


@pytest.fixture(scope="module")
def lab_page(browser):
    """The lesson (and the broken cell) run top to bottom in JupyterLab; the page, the kernel
    websocket's frames as they arrive, and every request the page made. (``browser``: the one
    Chromium of this module, from conftest.py.)"""
    missing = jupyterlab_missing()
    if missing:
        pytest.skip(missing)
    notebooks = {"lesson.ipynb": lesson([code_cell(BROKEN, "test-broken")])}
    with serve_lab(notebooks) as lab:
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            page = ctx.new_page()
            frames: list[tuple[float, int]] = []
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))

            def watch(ws) -> None:
                if "/api/kernels/" in ws.url and "/channels" in ws.url:
                    for event in ("framesent", "framereceived"):
                        ws.on(event, lambda f: frames.append((time.monotonic(), len(f or ""))))

            page.on("websocket", watch)
            open_notebook(page, lab, "lesson.ipynb")
            run_all(page)
            page.wait_for_function(
                f"{PLAYERS}.length >= 4 && {PLAYERS}.every((p) => p.dataset.rendered"
                " && p.querySelectorAll('.js-plotly-plot .main-svg').length >= 6)",
                timeout=60_000,
            )
            yield page, frames, requests, lab.url
        finally:
            ctx.close()


def test_every_player_renders_both_panels_with_nothing_from_a_network(lab_page):
    page, _, requests, url = lab_page
    players = page.evaluate(
        f"{PLAYERS}.map((p) => ({{titles: [...p.querySelectorAll('.h2o-title')]"
        ".map((t) => t.textContent), plots: p.querySelectorAll('.js-plotly-plot').length,"
        " text: p.innerText}))"
    )
    assert [p["titles"] for p in players] == [
        ["A · StreamingLLM", "B · H2O"],
        ["A · H2O", "B · StreamingLLM"],
        ["A · H2O", "B · Scissorhands"],
        ["A · My policy", "B · H2O"],
    ]
    for p in players:
        assert p["plots"] >= 6  # per panel: detail and overview; mass and recall below
        assert "NaN" not in p["text"] and "undefined" not in p["text"]
    outside = [u for u in requests if not u.startswith((url, "blob:", "data:"))]
    assert outside == []  # plotly.js and the widget's module come with the kernel's message


def test_arrow_steps_a_player_with_no_kernel_message(lab_page):
    page, frames, _, _ = lab_page
    trace_steps = h2o.canonical_trace().steps  # chapter 2's player
    first = page.locator(PLAYER).first
    first.scroll_into_view_if_needed()
    before = int(first.get_attribute("data-rendered"))
    first.locator(".h2o-story").first.click()  # a click gives the player the keys
    page.wait_for_timeout(300)
    sent = len(frames)
    for i in range(1, 4):
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            f"Number(document.querySelector('{PLAYER}').dataset.rendered) === {before + i}"
        )
    page.wait_for_timeout(constants.IDLE_REPORT_MS + 800)  # past the moment the app reports
    assert frames[sent:] == []  # not one byte to or from the kernel for three steps
    assert sent > 0  # the watcher does see this websocket (running the cells used it)
    page.keyboard.press("End")  # past the loaded range: the kernel sends the last steps
    page.wait_for_function(
        f"Number(document.querySelector('{PLAYER}').dataset.rendered) === {trace_steps - 1}"
        f" && !document.querySelector('{PLAYER}').dataset.loading",
        timeout=15_000,
    )
    assert len(frames) >= sent + 2  # the request, and the range in reply


def test_the_policy_defined_in_a_cell_plays(lab_page):
    page, _, _, _ = lab_page
    mine = page.locator(PLAYER).nth(3)
    mine.scroll_into_view_if_needed()
    assert mine.locator(".h2o-title").first.inner_text() == "A · My policy"
    start = int(mine.get_attribute("data-rendered"))
    mine.locator('button[data-action="play"]').click()
    page.wait_for_function(f"Number({PLAYERS}[3].dataset.rendered) >= {start + 5}", timeout=15_000)
    mine.locator('button[data-action="play"]').click()  # pause
    story = mine.locator(".h2o-story").first.inner_text()
    assert story.strip() and "NaN" not in story


def test_a_broken_policy_is_a_clear_error_in_its_cell_not_a_blank_player(lab_page):
    page, _, _, _ = lab_page
    cell = page.locator(".jp-CodeCell").last
    assert "class Broken" in cell.locator(".jp-InputArea").inner_text()
    out = cell.locator(".jp-OutputArea")
    error = out.inner_text()
    assert "ValueError: policy A (Broken(budget=256" in error
    assert "failed on canonical: my rule has a bug" in error
    assert out.locator(PLAYER).count() == 0


def test_the_player_renders_styled_and_steps_in_marimo(browser):
    """``marimo run`` of a notebook holding ``mo.ui.anywidget(Player(...))``: marimo draws the
    widget in a shadow root — the stylesheet must be put there, and the keys read that root's
    focus; plotly.js is asked of marimo's kernel as of Jupyter's."""
    missing = marimo_missing()
    if missing:
        pytest.skip(missing)
    with serve_marimo(MARIMO_NOTEBOOK) as url:
        ctx = browser.new_context(viewport={"width": 1280, "height": 900})
        try:
            page = ctx.new_page()
            requests: list[str] = []
            page.on("request", lambda r: requests.append(r.url))
            page.goto(url)
            player = page.locator(PLAYER)  # Playwright's CSS selectors pierce shadow roots
            player.first.wait_for(timeout=60_000)
            page.wait_for_function(
                "() => { const host = [...document.querySelectorAll('*')].find((e) => e.shadowRoot"
                " && e.shadowRoot.querySelector('.h2o-player .js-plotly-plot .main-svg'));"
                " return !!host; }",
                timeout=60_000,
            )
            titles = player.locator(".h2o-title").all_inner_texts()
            assert titles == ["A · H2O", "B · Scissorhands"]
            # The stylesheet reached the shadow root: the panels sit side by side.
            boxes = [player.locator(".h2o-panel").nth(i).bounding_box() for i in range(2)]
            assert boxes[0]["y"] == boxes[1]["y"] and boxes[0]["x"] < boxes[1]["x"]
            before = int(player.get_attribute("data-rendered"))
            player.locator(".h2o-story").first.click()
            page.keyboard.press("ArrowRight")
            page.wait_for_function(
                "() => { const host = [...document.querySelectorAll('*')].find((e) => e.shadowRoot"
                " && e.shadowRoot.querySelector('.h2o-player'));"
                f" return host.shadowRoot.querySelector('.h2o-player').dataset.rendered"
                f" === '{before + 1}'; }}",
                timeout=10_000,
            )
            local = url.split("/?")[0]
            assert [u for u in requests if not u.startswith((local, "blob:", "data:"))] == []
        finally:
            ctx.close()


def test_every_player_passes_axe_and_says_what_it_shows_in_jupyterlab(lab_page):
    """axe-core on the widgets JupyterLab shows (the lesson's four players, scrolled into view in
    turn so each has drawn): no serious or critical violation inside them, and each player's
    charts named and described from Chromium's accessibility tree, as in the app. JupyterLab's own
    interface is not audited: it is not ours (and has its own accessibility work upstream)."""
    from test_a11y_browser import FAILING, PLAYER_CHARTS, accessibility_tree

    axe = pytest.importorskip("axe_playwright_python.sync_playwright")
    page, _, _, _ = lab_page
    players = page.locator(PLAYER)
    for i in range(players.count()):  # JupyterLab virtualises what is off screen
        players.nth(i).scroll_into_view_if_needed()
        page.wait_for_timeout(300)
    result = axe.Axe().run(page, context={"include": [[PLAYER]]})
    serious = [
        f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:3]}"
        for v in result.response["violations"]
        if v["impact"] in FAILING
    ]
    assert not serious, "\n".join(serious)
    assert result.response["passes"], "axe checked nothing inside the players"
    tree = accessibility_tree(page, PLAYER_CHARTS)
    assert len(tree) == 4 * 2 * 4  # four players; per panel: two heatmaps, the slots, a metric
    for node in tree:
        assert node["role"] in ("figure", "image"), node
        assert node["name"].strip(), node
        assert node["description"].strip(), node
