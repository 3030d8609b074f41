"""What a user of the Step through page times with a stopwatch, measured in a real Chromium.

Run: ``python benchmarks/app.py [--repeats 5] [--json]``

Starts ``streamlit run app/main.py`` on a free port and drives Debian's Chromium with Playwright
(``tests/streamlit_server.py``), on the canonical trace, H2O vs StreamingLLM at budget 256:

* **first paint** — navigation start to the player showing the step (controls, both stories and
  kept slots), and to every plot drawn: once on a fresh server, then (medians) from a new browser
  and from the same browser reloading (its cache holds plotly.js);
* **a step** — a "+1" click, or a → key press, until the new step is painted (the next animation
  frame after the player drew it), timed inside the page;
* **websocket bytes per step** inside the loaded range (frames counted while stepping);
* **play rate** against its label, at 5, 10, 30 and 60 steps/s (steps advanced over the wall
  clock, both read inside the page);
* **pause** — the step on screen against the step the server holds (a whole-page rerun writes
  the server's step into the link);
* **20 rapid clicks** 50 ms apart — how far the step moved;
* **one range load** — the largest websocket frame while play crosses ranges, and the initial.

Medians, because the machine is shared; the targets are printed next to each figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from streamlit_server import PLAYER, launch, serve, shown_step, wait_player, wait_ready  # noqa: E402

STEP_JS = """([selector, key]) => new Promise((resolve) => {
  const root = document.querySelector('.h2o-player');
  const want = String(Number(root.dataset.rendered) + 1);
  const t0 = performance.now();
  if (key) document.dispatchEvent(new KeyboardEvent('keydown', {key: 'ArrowRight', bubbles: true}));
  else root.querySelector(selector).click();
  const check = () => root.dataset.rendered === want
    ? requestAnimationFrame(() => resolve(performance.now() - t0))
    : requestAnimationFrame(check);
  requestAnimationFrame(check);
})"""

PLAY_JS = """(ms) => new Promise((resolve) => {
  const root = document.querySelector('.h2o-player');
  const p = root.__h2o;
  const s0 = p.st.t, t0 = performance.now();
  p.togglePlay();
  setTimeout(() => {
    const s1 = p.st.t, t1 = performance.now();
    p.togglePlay();
    resolve([s1 - s0, (t1 - t0) / 1000]);
  }, ms);
})"""

FIRST_PAINT_JS = """() => {
  const p = document.querySelector('.h2o-player').__h2o;
  return [p.marks.rendered, performance.now()];
}"""


def watch(page) -> list[tuple[str, int, float]]:
    frames: list[tuple[str, int, float]] = []

    def on_ws(ws):
        ws.on("framesent", lambda f: frames.append(("sent", len(f), time.monotonic())))
        ws.on("framereceived", lambda f: frames.append(("received", len(f), time.monotonic())))

    page.on("websocket", on_ws)
    return frames


def server_step(page) -> int:
    """The step the server holds: a whole-page rerun (the presenter switch, twice) writes it
    into the link from the session. Presenter mode collapses the sidebar that holds the switch:
    it is opened again to switch back."""
    for _ in range(2):
        switch = page.get_by_text("Presenter mode")
        if not switch.is_visible():
            page.get_by_test_id("stExpandSidebarButton").click()
        switch.click()
        wait_ready(page)
    page.wait_for_timeout(300)
    return int(parse_qs(urlparse(page.url).query)["step"][0])


def first_paint(ctx, url: str) -> tuple[float, float]:
    """Navigation start → the player's first paint, and → every plot drawn (seconds)."""
    page = ctx.new_page()
    page.goto(url)
    wait_player(page, plots=6)
    painted, now = page.evaluate(FIRST_PAINT_JS)
    page.close()
    return painted / 1000, now / 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    out: dict[str, object] = {}
    with serve() as url, sync_playwright() as pw:
        browser = launch(pw)
        view = f"{url}/step-through?step=2000"
        # Cold: a fresh server. New browser: a warm server, a browser with empty caches. Warm:
        # the same browser again (a student reloading) — plotly.js comes from its cache.
        browsing = browser.new_context(viewport={"width": 1280, "height": 720})
        cold = first_paint(browsing, view)
        fresh = []
        for _ in range(args.repeats):
            ctx = browser.new_context(viewport={"width": 1280, "height": 720})
            fresh.append(first_paint(ctx, view))
            ctx.close()
        warm = [first_paint(browsing, view) for _ in range(args.repeats)]
        browsing.close()
        out["first_paint_cold_s"] = cold[0]
        out["all_plots_cold_s"] = cold[1]
        out["first_paint_new_browser_s"] = statistics.median(w[0] for w in fresh)
        out["all_plots_new_browser_s"] = statistics.median(w[1] for w in fresh)
        out["first_paint_warm_s"] = statistics.median(w[0] for w in warm)
        out["all_plots_warm_s"] = statistics.median(w[1] for w in warm)

        ctx = browser.new_context(viewport={"width": 1280, "height": 720})
        page = ctx.new_page()
        frames = watch(page)
        page.goto(view)
        wait_player(page, plots=6)
        page.wait_for_timeout(1500)
        initial = max(n for d, n, _ in frames if d == "received")
        before = len(frames)
        clicks = [page.evaluate(STEP_JS, ['[data-action="next"]', False]) for _ in range(40)]
        keys = [page.evaluate(STEP_JS, [None, True]) for _ in range(40)]
        stepping = frames[before:]
        out["click_ms_median"] = statistics.median(clicks)
        out["click_ms_max"] = max(clicks)
        out["key_ms_median"] = statistics.median(keys)
        out["key_ms_max"] = max(keys)
        out["ws_bytes_per_step"] = sum(n for _, n, _ in stepping) / 80

        rapid = []
        for _ in range(args.repeats):
            page.wait_for_timeout(1000)
            s0 = shown_step(page)
            for _ in range(20):
                page.locator(f'{PLAYER} [data-action="next"]').click(delay=0)
                page.wait_for_timeout(50)
            page.wait_for_timeout(300)
            rapid.append(shown_step(page) - s0)
        out["rapid_20_clicks_moved"] = rapid

        rates = {}
        loads = []
        for speed in (5, 10, 30, 60):
            page.select_option(f"{PLAYER} .h2o-speed select", str(speed))
            page.wait_for_timeout(800)
            before = len(frames)
            steps, secs = page.evaluate(PLAY_JS, 5000)
            rates[speed] = steps / secs
            page.wait_for_timeout(1200)
            loads += [n for d, n, _ in frames[before:] if d == "received" and n > 50_000]
        out["play_rate"] = {f"{k} steps/s": round(v, 2) for k, v in rates.items()}
        out["play_rate_vs_label"] = {f"{k} steps/s": round(v / k, 3) for k, v in rates.items()}
        out["range_load_bytes"] = {"initial": initial, "largest_while_playing": max(loads or [0])}

        pauses = []
        page.select_option(f"{PLAYER} .h2o-speed select", "30")
        for i in range(args.repeats):
            page.locator(f'{PLAYER} [data-action="play"]').click()
            page.wait_for_timeout(700 + 250 * i)
            page.locator(f'{PLAYER} [data-action="play"]').click()
            shown = shown_step(page)
            page.wait_for_timeout(400)
            pauses.append(server_step(page) - shown)
        out["pause_server_minus_shown"] = pauses
        ctx.close()
        browser.close()

    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    rows = [
        (
            "first paint, cold server: step, stories, kept slots / all plots (s)",
            f"{out['first_paint_cold_s']:.2f} / {out['all_plots_cold_s']:.2f}",
            "—",
        ),
        (
            "first paint, warm server, new browser (s)",
            f"{out['first_paint_new_browser_s']:.2f} / {out['all_plots_new_browser_s']:.2f}",
            "—",
        ),
        (
            "first paint, warm server and browser (reload) (s)",
            f"{out['first_paint_warm_s']:.2f} / {out['all_plots_warm_s']:.2f}",
            "≤ 2 (first paint)",
        ),
        (
            "+1 click → step painted (ms, median / max)",
            f"{out['click_ms_median']:.0f} / {out['click_ms_max']:.0f}",
            "≤ 100",
        ),
        (
            "→ key → step painted (ms, median / max)",
            f"{out['key_ms_median']:.0f} / {out['key_ms_max']:.0f}",
            "≤ 100",
        ),
        ("websocket bytes per step inside the range", f"{out['ws_bytes_per_step']:.0f}", "0"),
        ("20 rapid clicks (50 ms apart) moved", str(out["rapid_20_clicks_moved"]), "+20 each"),
        (
            "play rate / label",
            ", ".join(f"{k}: {v:.2f}" for k, v in out["play_rate_vs_label"].items()),
            "0.9–1.1",
        ),
        ("pause: server step − shown step", str(out["pause_server_minus_shown"]), "0 each"),
        (
            "one range load (bytes): initial / largest while playing",
            "{initial:,} / {largest_while_playing:,}".format(**out["range_load_bytes"]),
            "≤ 1,500,000",
        ),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"{'what':{width}s}  {'measured':>28s}  target")
    for what, got, target in rows:
        print(f"{what:{width}s}  {got:>28s}  {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
