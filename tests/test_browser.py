"""The app in a real browser: Playwright drives Debian's Chromium against ``streamlit run``.

The step-through player steps, plays and scrubs in the browser: these tests hold it to what a
class needs — both panels in lock-step, keys, exact pause, rapid clicks counted, no websocket
traffic while stepping inside the loaded range, links that restore the whole view, a projector
sized window, and an exported file that plays from disk with no server. Every page renders in
the light and the dark theme (:func:`check_renders`, run by ``tests/test_a11y_browser.py`` on
the page it audits, so each page is loaded once per theme), one screenshot of each saved under
pytest's ``tmp_path``.
"""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, urlparse

import numpy as np
import pytest
from streamlit_server import (
    PLAYER,
    needs_chromium,
    serve,
    settle,
    shown_step,
    wait_player,
    wait_ready,
)

import h2o
from app import pages as app_pages
from app import shell

# url path, plotly charts expected at least, a text the page shows
PAGES = [
    ("", 3, "H2O, step by step"),
    ("step-through", 6, "Step through a replay"),
    ("window-explorer", 2, "recentWindow explorer"),
    ("stale-spike", 8, "Stale spike: H2O vs Scissorhands"),
    ("all-policies", 3, "All policies"),
    ("real-model", 1, "A real LLM inside"),
    ("where-budget", 3, "Where should the budget go?"),
    ("how-it-works", 0, "How it works"),
]
DEEP_LINKS = [
    ("step-through?step=1000", "Step through a replay"),
    ("window-explorer?trace=toy&budget=12&recent_window=3", "recentWindow explorer"),
    ("stale-spike?spike_step=20", "Stale spike: H2O vs Scissorhands"),
    ("all-policies?trace=toy", "All policies"),
    ("real-model", "A real LLM inside"),
    ("where-budget", "Where should the budget go?"),
    ("how-it-works", "How it works"),
]

pytestmark = [pytest.mark.browser, needs_chromium]


def new_page(browser, scheme: str = "light", size: tuple[int, int] = (1500, 2400)):
    ctx = browser.new_context(
        viewport={"width": size[0], "height": size[1]}, color_scheme=scheme, accept_downloads=True
    )
    return ctx, ctx.new_page()


def watch_websocket(page) -> list[tuple[str, int]]:
    """Every websocket frame the page sends or receives, as (direction, bytes)."""
    frames: list[tuple[str, int]] = []

    def on_ws(ws):
        ws.on("framesent", lambda f: frames.append(("sent", len(f))))
        ws.on("framereceived", lambda f: frames.append(("received", len(f))))

    page.on("websocket", on_ws)
    return frames


def stories(page) -> list[str]:
    return page.locator(f"{PLAYER} .h2o-story").all_inner_texts()


def query(page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


def wait_step(page, step: int) -> None:
    """Until the player has painted ``step`` (it paints on the next animation frame)."""
    page.wait_for_function(
        f"document.querySelector('{PLAYER}').dataset.rendered === '{step}'", timeout=10_000
    )


def button(page, action: str):
    return page.locator(f'{PLAYER} [data-action="{action}"]')


def check_renders(page, path: str, shot, errors: list[str]) -> None:
    """The page at ``path`` (loaded and idle) shows its heading and its charts (``PAGES``), no
    exception and no script error (``errors``: the page's ``pageerror`` events); a full-page
    screenshot to ``shot``. A page not in ``PAGES`` is checked for the last two only."""
    charts, heading = {p: (c, h) for p, c, h in PAGES}.get(path, (0, None))
    if heading is not None:
        page.get_by_text(heading).first.wait_for(timeout=60_000)
    if charts:
        page.wait_for_function(
            f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {charts}",
            timeout=60_000,
        )
    page.screenshot(path=str(shot), full_page=True)
    assert page.locator('[data-testid="stException"]').count() == 0
    assert not errors, errors
    print(f"screenshot: {shot}")


@pytest.mark.parametrize(("link", "heading"), DEEP_LINKS)
def test_a_deep_link_opens_cleanly_on_a_fresh_server(browser, link, heading):
    """The first visit of a new server, straight to a page's own path with its settings: no
    "Page not found" dialog, the page itself, and the link's values."""
    with serve() as url:
        ctx, page = new_page(browser)
        try:
            page.goto(f"{url}/{link}")
            wait_ready(page)
            page.get_by_text(heading).first.wait_for(timeout=60_000)
            assert page.get_by_text("Page not found").count() == 0
            assert page.locator('[data-testid="stException"]').count() == 0
            assert page.locator("h1").first.inner_text().startswith(heading)
            path = link.split("?")[0]
            assert urlparse(page.url).path == f"/{path}"
            for key, value in parse_qs(urlparse(f"/?{link.partition('?')[2]}").query).items():
                assert query(page).get(key) == value[0], key
            if path == "step-through":
                wait_player(page)
                assert shown_step(page) == 1000
        finally:
            ctx.close()


# When the player's root first appears in the page, recorded from the first script on.
_MOUNTED = """
new MutationObserver((_, obs) => {
  if (!document.querySelector(".h2o-root")) return;
  window.__h2oMounted = performance.now();
  obs.disconnect();
}).observe(document, { childList: true, subtree: true });
"""


@pytest.mark.parametrize("path", ["step-through", "stale-spike", "all-policies"])
def test_plotly_js_is_fetched_once_and_before_the_player_mounts(server, browser, path):
    """A page that opens on the player starts fetching plotly.js before the player arrives (the
    router's preload), and the player then uses that fetch: one request a page. A page without
    the player never fetches the app's copy (its charts use Streamlit's own)."""
    ctx, page = new_page(browser)
    ctx.add_init_script(_MOUNTED)
    try:
        page.goto(f"{server}/{path}")
        wait_ready(page)
        if path != "all-policies":
            wait_player(page)
            page.wait_for_function(
                "document.querySelectorAll('.js-plotly-plot .main-svg').length >= 2",
                timeout=60_000,
            )
        fetched = page.evaluate(
            """(path) => performance.getEntriesByType("resource")
                 .filter((e) => e.name.endsWith(path))
                 .map((e) => e.startTime)""",
            "/" + shell.PLOTLY_PATH,  # the page shell's copy: `make run` serves the shell
        )
        if path == "all-policies":
            assert fetched == []
            return
        assert len(fetched) == 1, fetched
        mounted = page.evaluate("() => window.__h2oMounted")
        assert mounted is not None and fetched[0] < mounted, (fetched, mounted)
    finally:
        ctx.close()


# The animation frame in which each plot of the player first has its svg, by the plot's class.
_PLOT_FRAMES = """
window.__h2oFrame = 0;
const tick = () => { window.__h2oFrame++; requestAnimationFrame(tick); };
requestAnimationFrame(tick);
window.__h2oPlots = [];
new MutationObserver(() => {
  document.querySelectorAll(".h2o-plot").forEach((p) => {
    if (!p.__seen && p.querySelector(".main-svg")) {
      p.__seen = true;
      window.__h2oPlots.push([[...p.classList].find((c) => c !== "h2o-plot"), window.__h2oFrame]);
    }
  });
}).observe(document, { childList: true, subtree: true });
"""


def test_the_first_heatmap_is_painted_before_the_other_plots_are_drawn(server, browser):
    """The player draws its first panel's detail heatmap, lets the browser paint it, then the
    other panel's, then the overviews and metrics: the first figure never waits for the last."""
    ctx, page = new_page(browser)
    ctx.add_init_script(_PLOT_FRAMES)
    try:
        page.goto(f"{server}/step-through")
        wait_ready(page)
        wait_player(page)
        page.wait_for_function("window.__h2oPlots.length >= 6", timeout=60_000)
        plots = page.evaluate("() => window.__h2oPlots")
        frame = {}
        for cls, f in plots:
            frame.setdefault(cls, []).append(f)
        assert len(frame["h2o-detail"]) == 2, plots
        first, second = frame["h2o-detail"]
        assert first < second, plots
        assert second < min(frame["h2o-overview"] + frame["h2o-mass"] + frame["h2o-recall"]), plots
    finally:
        ctx.close()


def test_keys_step_both_panels_in_the_browser_alone(server, browser):
    """←/→ and Shift move the step in both panels at once; no websocket frame while stepping;
    once the user stops, one small report, and the address bar holds the step."""
    ctx, page = new_page(browser, size=(1280, 720))
    frames = watch_websocket(page)
    try:
        page.goto(f"{server}/step-through?step=2000")
        wait_player(page)
        page.wait_for_timeout(1500)  # the page is settled
        before = len(frames)
        page.locator(f"{PLAYER} .h2o-title").first.click()  # focus the page, not a widget
        for key in ["ArrowRight"] * 5 + ["Shift+ArrowRight", "ArrowLeft"]:
            page.keyboard.press(key)
        wait_step(page, 2014)  # a key moves the step at once; the paint follows in the next frame
        during = frames[before:]
        assert during == [], f"stepping inside the loaded range sent {during}"
        assert all(s.startswith("step 2014:") for s in stories(page))
        page.wait_for_timeout(2000)  # the user stopped: the browser tells the server
        after = frames[before:]
        assert any(d == "sent" for d, _ in after)
        assert max(n for d, n in after if d == "received") < 20_000, after
        assert query(page)["step"] == "2014"
    finally:
        ctx.close()


def test_twenty_rapid_clicks_move_exactly_twenty_steps(server, browser):
    ctx, page = new_page(browser, size=(1280, 720))
    try:
        page.goto(f"{server}/step-through?step=1000")
        wait_player(page)
        nxt = button(page, "next")
        for _ in range(20):
            nxt.click(delay=0)
            page.wait_for_timeout(50)
        wait_step(page, 1020)
        assert all(s.startswith("step 1020:") for s in stories(page))
        page.wait_for_timeout(1500)
        assert query(page)["step"] == "1020"
    finally:
        ctx.close()


def test_pause_holds_exactly_the_step_shown(server, browser):
    """Play at 30 steps/s, pause: the step on screen is the one the server then holds (a full
    rerun — the presenter switch — rewrites the link from the server's own state)."""
    ctx, page = new_page(browser, size=(1280, 720))
    try:
        page.goto(f"{server}/step-through?step=500&speed=30")
        wait_player(page)
        started = time.monotonic()
        button(page, "play").click()
        page.wait_for_timeout(1500)
        button(page, "play").click()  # pause
        played = time.monotonic() - started  # more than 1.5 s when a click waits on a busy machine
        shown = shown_step(page)
        # it played (at least 20 steps), at no more than its rate over the time it had
        assert 500 + 20 <= shown <= 500 + 30 * played * 1.1 + 5, (shown, played)
        page.wait_for_timeout(300)
        assert shown_step(page) == shown  # stopped
        page.get_by_text("Presenter mode").click()  # a whole-page rerun
        wait_ready(page)
        page.wait_for_timeout(500)
        assert query(page)["step"] == str(shown)
        assert shown_step(page) == shown
    finally:
        ctx.close()


def test_play_runs_to_the_end_and_stops(server, browser):
    ctx, page = new_page(browser)
    try:
        page.goto(f"{server}/step-through?trace=toy&budget=8&recent_window=2&step=30&speed=10")
        wait_player(page)
        assert shown_step(page) == 30
        button(page, "play").click()
        page.wait_for_function(
            f"document.querySelector('{PLAYER}').dataset.rendered === '39'", timeout=10_000
        )
        page.wait_for_timeout(500)
        assert button(page, "play").inner_text().strip() == "Play"
        assert shown_step(page) == 39
        page.wait_for_timeout(1000)
        assert query(page)["step"] == "39"
    finally:
        ctx.close()


def test_clicking_an_eviction_marker_jumps_to_its_step(server, browser):
    ctx, page = new_page(browser)
    try:
        page.goto(f"{server}/step-through?trace=toy&budget=8&recent_window=2&step=5&reveal=1")
        wait_player(page)
        marks = page.locator(f"{PLAYER} .h2o-detail").first.locator(".scatterlayer .points path")
        marks.first.wait_for(timeout=30_000)
        box = marks.nth(marks.count() // 2).bounding_box()
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.wait_for_function(f"document.querySelector('{PLAYER}').dataset.rendered !== '5'")
        step = shown_step(page)
        assert "evicted" in stories(page)[0]  # a marker's step is an eviction step
        page.wait_for_timeout(1500)
        assert query(page)["step"] == str(step)
    finally:
        ctx.close()


def test_a_copied_link_restores_every_setting(server, browser):
    link = (
        f"{server}/step-through?trace=toy&budget=8&recent_window=2&policy_b=scissorhands&step=12"
        "&colour=linear&rows=all&width=64&speed=30&reveal=1&presenter=1"
    )
    ctx, page = new_page(browser)
    try:
        page.goto(link)
        wait_player(page, plots=2)
        assert shown_step(page) == 12
        page.locator(f"{PLAYER} .h2o-settings summary").click()  # presenter: behind a button
        on = page.locator(f"{PLAYER} .h2o-seg-btn.on").all_inner_texts()
        assert on == ["linear", "every position (pooled)", "all 40"]
        assert page.locator(f"{PLAYER} .h2o-speed select").input_value() == "30"
        assert page.locator(f"{PLAYER} .h2o-reveal input").is_checked()
        assert "h2o-presenter" in page.get_attribute(PLAYER, "class")
        assert "Scissorhands (recent_window=2)" in stories(page)[1] or any(
            "Scissorhands (recent_window=2)" in t
            for t in page.locator(f"{PLAYER} .h2o-title").all_inner_texts()
        )
        for key in ("colour", "rows", "speed", "reveal", "presenter", "step"):
            assert key in query(page)
    finally:
        ctx.close()


def test_a_projector_shows_every_control_whole(server, browser, tmp_path):
    """At 1280×720 no control's text is cut, and the step controls stay on screen while the
    heatmaps do (a sticky bar)."""
    ctx, page = new_page(browser, size=(1280, 720))
    try:
        page.goto(f"{server}/step-through?step=2000")
        wait_player(page)
        cut = page.evaluate(
            """() => [...document.querySelectorAll(
                '[data-testid="stMain"] button, [data-testid="stMain"] select')]
              .filter(b => b.offsetParent !== null && b.scrollWidth > b.clientWidth + 1)
              .map(b => b.innerText || b.getAttribute('aria-label'))"""
        )
        assert cut == [], f"truncated controls: {cut}"
        heat = page.locator(f"{PLAYER} .h2o-detail").first
        heat.scroll_into_view_if_needed()
        page.wait_for_timeout(300)
        bar = page.locator(f"{PLAYER} .h2o-bar").bounding_box()
        assert bar["y"] >= 0 and bar["y"] + bar["height"] <= 720
        assert button(page, "next").is_visible()
        sizes = page.evaluate(
            """() => [...document.querySelectorAll(
                '.h2o-player .xtick text, .h2o-player .ytick text, .h2o-player .legendtext')]
              .map(t => parseFloat(getComputedStyle(t).fontSize))"""
        )
        assert sizes and min(sizes) >= 14
        page.screenshot(path=str(tmp_path / "projector.png"))
    finally:
        ctx.close()


@pytest.mark.parametrize(
    "link",
    [("" if p.default else p.url_path) for p in app_pages.PAGES] + [d[0] for d in DEEP_LINKS],
)
def test_a_projector_shows_every_metric_whole(server, browser, link):
    """At 1280×720 no metric's label, value or caption is cut short, on every page as it opens
    and at the deep links' settings: Streamlit ends a metric's line with an ellipsis where it
    does not fit, and a cut number is a claim the room cannot read."""
    ctx, page = new_page(browser, size=(1280, 720))
    try:
        page.goto(f"{server}/{link}")
        settle(page, timeout=240)
        cut = page.evaluate(
            """() => [...document.querySelectorAll(
                '[data-testid="stMain"] [data-testid="stMetric"] *')]
              .filter(e => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
              .map(e => e.innerText)"""
        )
        assert cut == [], f"metrics cut at 1280 px: {cut}"
    finally:
        ctx.close()


def test_the_exported_file_plays_from_disk(server, browser, tmp_path):
    ctx, page = new_page(browser)
    try:
        page.goto(f"{server}/step-through?trace=toy&budget=8&recent_window=2&step=10")
        wait_player(page)
        with page.expect_download(timeout=60_000) as dl:
            page.get_by_role("button", name=re.compile("Download these steps as HTML")).click()
        path = tmp_path / "export.html"
        dl.value.save_as(path)
        assert path.stat().st_size > 1_000_000  # plotly.js is inside
    finally:
        ctx.close()
    ctx, page = new_page(browser)
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
        page.goto(path.as_uri())
        wait_player(page)
        assert shown_step(page) == 10
        page.keyboard.press("ArrowRight")
        wait_step(page, 11)
        button(page, "play").click()
        page.wait_for_function(f"Number(document.querySelector('{PLAYER}').dataset.rendered) > 13")
        assert [u for u in requests if not u.startswith(("file:", "data:", "blob:"))] == []
    finally:
        ctx.close()


def test_the_browser_derives_the_replays_kept_positions(server, browser):
    ctx, page = new_page(browser)
    try:
        page.goto(f"{server}/step-through?step=1500&policy_b=tova")
        wait_player(page)
        (a, b) = page.evaluate(f"document.querySelector('{PLAYER}').__h2o.h.range")
        reps = [
            h2o.replay(h2o.H2O(256, recent_window=32), h2o.canonical_trace()),
            h2o.replay(h2o.TOVA(256, recent_window=1), h2o.canonical_trace()),
        ]
        for t in (a, (a + b) // 2, b - 1):
            for i, rep in enumerate(reps):
                got = page.evaluate(
                    f"(() => {{ const p = document.querySelector('{PLAYER}').__h2o;"
                    f" const k = p.keptAt({i}, {t});"
                    " return [Array.from(k.pos), Array.from(k.score)]; })()"
                )
                pos, scores = rep.kept_at(t)
                assert got[0] == pos.tolist()
                assert np.array_equal(np.float32(got[1]), scores.astype(np.float32))
    finally:
        ctx.close()


def test_the_lesson_moves_by_keyboard_in_presenter_mode(server, browser):
    """A clicker sends PageDown / PageUp (or → / ←): one chapter per press, and the link
    follows, so a lecturer can resume where they stopped."""
    ctx, page = new_page(browser, size=(1280, 720))
    try:
        page.goto(f"{server}/?presenter=1&chapter=2")
        wait_ready(page)
        page.get_by_role("heading", name="2. Sinks and recency").wait_for(timeout=60_000)
        for key, want in (
            ("PageDown", "3. Heavy hitters"),
            ("ArrowRight", "4. The window is load-bearing"),
            ("PageUp", "3. Heavy hitters"),
        ):
            # The keys' component mounts a moment after the script finishes.
            page.wait_for_function(
                "document.documentElement.dataset.h2oChapterKeys === 'bound'", timeout=30_000
            )
            page.locator("body").press(key)
            page.get_by_role("heading", name=want).wait_for(timeout=60_000)
            wait_ready(page)
        assert query(page)["chapter"] == "3"
        assert page.get_by_role("heading", name="4. The window is load-bearing").count() == 0
    finally:
        ctx.close()


def test_a_chapter_opens_its_full_page_with_the_same_settings(server, browser):
    ctx, page = new_page(browser, size=(1280, 720))
    try:
        page.goto(f"{server}/?presenter=1&chapter=3")
        wait_ready(page)
        page.get_by_role("button", name=re.compile("Open this in Step through")).click()
        page.get_by_text("Step through a replay").first.wait_for(timeout=60_000)
        wait_player(page)
        q = query(page)
        assert urlparse(page.url).path == "/step-through"
        assert (q["trace"], q["budget"], q["recent_window"], q["step"]) == ("toy", "8", "2", "8")
        assert shown_step(page) == 8
    finally:
        ctx.close()


@pytest.mark.model
def test_real_model_layer_story_runs_in_the_browser(server, browser, tmp_path):
    from h2o.model import ModelNotFoundError, find_gguf

    try:
        find_gguf()
    except ModelNotFoundError as e:
        pytest.skip(f"SmolLM2 GGUF not available: {e}")
    ctx, page = new_page(browser)
    try:
        page.goto(f"{server}/real-model")
        wait_ready(page)
        page.locator(".st-key-w_rm_story_tokens").get_by_text("512", exact=True).first.click()
        wait_ready(page)
        t0 = time.monotonic()
        page.locator(".st-key-rm_story_go button").first.click()
        # The trace chart, then the two layer-story charts (the progress bar shows meanwhile).
        page.wait_for_function(
            "document.querySelectorAll('.js-plotly-plot .main-svg').length >= 3", timeout=120_000
        )
        wait_ready(page)
        print(f"browser: layer story at 512 tokens in {time.monotonic() - t0:.1f} s")
        assert page.get_by_text(re.compile(r"of 30 layers")).count() >= 1
        assert page.locator('[data-testid="stException"]').count() == 0
        page.screenshot(path=str(tmp_path / "real-model-story.png"), full_page=True)
        print(f"screenshot: {tmp_path / 'real-model-story.png'}")
    finally:
        ctx.close()
