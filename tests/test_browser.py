"""The app in a real browser: Playwright drives Debian's Chromium against ``streamlit run``.

Started the way Streamlit's own e2e suite does it: a headless server on a free local port, polled
on ``/_stcore/health``; a page is ready when ``[data-testid="stApp"]`` reports
``data-test-connection-state="CONNECTED"`` and a ``data-test-script-state`` other than
``running``. One screenshot per page and theme is saved under pytest's ``tmp_path``.

Playwright cannot download its own browsers here; these tests use ``/usr/bin/chromium`` and skip,
saying how to get it, where it is missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("H2O_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
# url path, plotly charts expected at least, a text the page shows
PAGES = [
    ("", 8, "Step through a replay"),
    ("window-explorer", 2, "recentWindow explorer"),
    ("stale-spike", 8, "Stale spike: H2O vs Scissorhands"),
    ("all-policies", 3, "All policies"),
    ("real-model", 1, "A real LLM inside"),
    ("how-it-works", 0, "How it works"),
]

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not CHROMIUM.exists(),
        reason=f"browser tests need Debian's Chromium at {CHROMIUM}: run `apt-get install -y "
        "chromium` (Playwright cannot download its own browsers here), or point H2O_CHROMIUM "
        "at a Chromium binary",
    ),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve():
    """``streamlit run`` the app on a free local port; yields its URL once healthy."""
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(ROOT / "app" / "main.py"),
        "--server.headless=true",
        f"--server.port={port}",
        "--server.address=127.0.0.1",
        "--browser.gatherUsageStats=false",
        "--server.fileWatcherType=none",
    ]
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"h2o-streamlit-{port}.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"streamlit did not start; see {log.name}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def server():
    with serve() as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


def wait_ready(page, timeout: float = 120) -> None:
    """Connected, and the script has finished (it may start a moment after the click)."""
    page.wait_for_selector(
        '[data-testid="stApp"][data-test-connection-state="CONNECTED"]', timeout=timeout * 1000
    )
    deadline = time.monotonic() + timeout
    idle_since = None
    while time.monotonic() < deadline:
        state = page.get_attribute('[data-testid="stApp"]', "data-test-script-state")
        if state not in ("running", "rerunRequested", "initial"):
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 0.6:
                return
        else:
            idle_since = None
        time.sleep(0.1)
    raise TimeoutError("the app script did not finish")


def new_page(browser, scheme: str):
    ctx = browser.new_context(viewport={"width": 1500, "height": 2400}, color_scheme=scheme)
    return ctx, ctx.new_page()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(("path", "charts", "heading"), PAGES)
def test_page_renders(server, browser, tmp_path, path, charts, heading, scheme):
    ctx, page = new_page(browser, scheme)
    try:
        page.goto(f"{server}/{path}")
        wait_ready(page)
        page.get_by_text(heading).first.wait_for(timeout=60_000)
        if charts:
            page.wait_for_function(
                f"document.querySelectorAll('.js-plotly-plot .main-svg').length >= {charts}",
                timeout=60_000,
            )
        shot = tmp_path / f"{path or 'step-through'}-{scheme}.png"
        page.screenshot(path=str(shot), full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator(".js-plotly-plot").count() >= charts
        if charts:
            assert page.locator(".js-plotly-plot .main-svg").count() >= charts
        print(f"screenshot: {shot}")
    finally:
        ctx.close()


def _story(page) -> str:
    return page.locator('[data-testid="stAlertContentInfo"]').first.inner_text()


def test_a_deep_link_opens_cleanly_on_a_fresh_server(browser):
    """The first visit of a new server, straight to a page other than the default one, with
    its settings: no "Page not found" dialog (Streamlit treats a ``pages/`` folder next to the
    main script as an old-style multipage app on a fresh server's first run; ours is
    ``views/``), the page itself, and the link's values."""
    with serve() as url:
        ctx, page = new_page(browser, "light")
        try:
            page.goto(f"{url}/window-explorer?trace=toy&budget=12&recent_window=3")
            wait_ready(page)
            page.get_by_text("recentWindow explorer").first.wait_for(timeout=60_000)
            page.wait_for_function(
                "document.querySelectorAll('.js-plotly-plot .main-svg').length >= 2",
                timeout=60_000,
            )
            assert page.get_by_text("Page not found").count() == 0
            assert page.locator('[data-testid="stException"]').count() == 0
            assert page.locator("h1").first.inner_text().startswith("recentWindow explorer")
            assert "budget=12" in page.url and "recent_window=3" in page.url
            budget = page.locator(".st-key-w_budget input").first
            assert budget.input_value() == "12"
        finally:
            ctx.close()


def test_next_step_changes_the_step_and_the_url(server, browser, tmp_path):
    ctx, page = new_page(browser, "light")
    try:
        page.goto(f"{server}/?step=2000")
        wait_ready(page)
        assert _story(page).startswith("step 2000:")
        for want in range(2001, 2009):
            page.locator(".st-key-step__next button").first.click()
            page.wait_for_function(
                "(w) => { const e = document.querySelector("
                "'[data-testid=\"stAlertContentInfo\"]'); "
                "return e && e.innerText.startsWith('step ' + w + ':'); }",
                arg=want,
                timeout=30_000,
            )
            wait_ready(page)
        assert "step=2008" in page.url
        page.screenshot(path=str(tmp_path / "after-next.png"), full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0
    finally:
        ctx.close()


def test_a_link_reopens_the_view_and_survives_page_switches(server, browser):
    ctx, page = new_page(browser, "light")
    try:
        page.goto(f"{server}/?trace=toy&budget=8&recent_window=2&policy_b=scissorhands&step=12")
        wait_ready(page)
        assert _story(page).startswith("step 12:")
        page.get_by_role("link", name="How it works").click()
        page.get_by_text("The card's pseudocode").wait_for(timeout=60_000)
        wait_ready(page)
        page.get_by_role("link", name="Step through").click()
        page.get_by_text("Step through a replay").wait_for(timeout=60_000)
        wait_ready(page)
        assert _story(page).startswith("step 12:")
        assert "Scissorhands (recent_window=2)" in page.locator("h3").all_inner_texts()[1]
    finally:
        ctx.close()


def test_play_runs_to_the_end_and_stops(server, browser):
    ctx, page = new_page(browser, "light")
    try:
        page.goto(f"{server}/?trace=toy&budget=8&recent_window=2&step=30")
        wait_ready(page)
        assert _story(page).startswith("step 30:")
        page.locator(".st-key-step__play button").first.click()
        page.get_by_role("button", name=re.compile("Pause")).wait_for(timeout=30_000)
        # 1 step / 0.4 s by default: nine ticks to the last step of the 40-step toy trace.
        page.wait_for_function(
            "() => { const e = document.querySelector('[data-testid=\"stAlertContentInfo\"]');"
            " return e && e.innerText.startsWith('step 39:'); }",
            timeout=60_000,
        )
        page.get_by_role("button", name=re.compile("Play")).wait_for(timeout=30_000)
        time.sleep(1.5)  # stopped: no further ticks
        assert _story(page).startswith("step 39:")
        assert page.locator('[data-testid="stException"]').count() == 0
    finally:
        ctx.close()


def test_clicking_an_eviction_marker_jumps_to_its_step(server, browser):
    ctx, page = new_page(browser, "light")
    try:
        page.goto(f"{server}/?trace=toy&budget=8&recent_window=2&step=5")
        wait_ready(page)
        marks = page.locator(".js-plotly-plot").first.locator(".scatterlayer .trace .points path")
        marks.first.wait_for(timeout=30_000)
        box = marks.nth(marks.count() // 2).bounding_box()
        page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.wait_for_function(
            "() => { const e = document.querySelector('[data-testid=\"stAlertContentInfo\"]');"
            " return e && !e.innerText.startsWith('step 5:'); }",
            timeout=30_000,
        )
        wait_ready(page)
        step = int(re.match(r"step (\d+):", _story(page)).group(1))
        assert "evicted" in _story(page)  # a marker's step is an eviction step
        assert f"step={step}" in page.url
    finally:
        ctx.close()


@pytest.mark.model
def test_real_model_layer_story_runs_in_the_browser(server, browser, tmp_path):
    from h2o.model import ModelNotFoundError, find_gguf

    try:
        find_gguf()
    except ModelNotFoundError as e:
        pytest.skip(f"SmolLM2 GGUF not available: {e}")
    ctx, page = new_page(browser, "light")
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
