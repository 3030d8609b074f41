"""How long each page takes to show its first chart, against the smallest page that has one.

Run: ``python benchmarks/first_paint.py [--repeats 3] [--pages lesson,step-through] [--json F]``

Two servers run side by side: the app (``streamlit run app/main.py``) and the *floor*
(``benchmarks/pages/floor.py``: a title and one Plotly heatmap), both with the same flags
(``tests/streamlit_server.py``). Every visit is a new browser context of Debian's Chromium
(nothing cached: plotly.js is fetched again, as a student's first visit fetches it), timed from
``goto`` to the first Plotly chart on screen (an ``.js-plotly-plot .main-svg`` in the page, then
one animation frame). The visits alternate floor, page, floor, page…, so the machine's load
falls on both; printed are medians and the ratio of each page's median to the floor's.

* **fresh**: the first visit of the lesson on a server that has served nothing yet (the first
  start after ``make run``: every cache empty, the compiled loops read from numba's disk cache),
  against the same floor;
* **warm**: every page of the menu after one visit has filled the server's caches, the way a
  class meets it.

Targets: warm pages ≤ 1.3× the floor, the fresh lesson ≤ 1.5×.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The repository first: benchmarks/app.py (this folder, a script) must not hide the app package.
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from streamlit_server import launch, serve_process  # noqa: E402

from app.pages import PAGES  # noqa: E402

FLOOR = ROOT / "benchmarks" / "pages" / "floor.py"
FIRST_CHART = ".js-plotly-plot .main-svg"
#: Pages without a chart, timed to their first figure of another kind.
FIRST_OTHER = {"how-it-works": "[data-testid='stCode'] code"}
TARGET_WARM, TARGET_FRESH = 1.3, 1.5


def first_chart(browser: Any, url: str, first: str = FIRST_CHART, timeout_s: float = 180) -> float:
    """Seconds from ``goto`` to the first chart (``first``) painted, in a new browser context."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 720})
    page = ctx.new_page()
    try:
        t0 = time.perf_counter()
        page.goto(url, wait_until="commit")
        # Any match with a box (the first in the page may be a hidden one), then one frame.
        page.wait_for_function(
            """(sel) => [...document.querySelectorAll(sel)].some((e) => {
                 const r = e.getBoundingClientRect();
                 return r.width > 0 && r.height > 0;
               })""",
            arg=first,
            timeout=timeout_s * 1000,
            polling="raf",
        )
        page.evaluate("() => new Promise((r) => requestAnimationFrame(() => r()))")
        return time.perf_counter() - t0
    except Exception as e:
        shot = Path("/tmp") / f"first-paint-timeout-{int(time.time())}.png"
        page.screenshot(path=str(shot), full_page=True)
        raise RuntimeError(f"{url}: no {first} after {timeout_s:.0f} s (see {shot})") from e
    finally:
        ctx.close()


def page_url(base: str, url_path: str, default: bool) -> str:
    return base + "/" if default else f"{base}/{url_path}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="visits per page (default: 3)")
    ap.add_argument("--pages", help="url paths to time (default: every page of the menu)")
    ap.add_argument("--no-fresh", action="store_true", help="skip the fresh-server visit")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    chosen = [p for p in PAGES if args.pages is None or p.url_path in args.pages.split(",")]
    if not chosen:
        ap.error(f"no page among {args.pages!r}; paths: {', '.join(p.url_path for p in PAGES)}")

    from playwright.sync_api import sync_playwright

    out: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "repeats": args.repeats}
    with (
        sync_playwright() as pw,
        serve_process(script=FLOOR) as (floor_url, _),
        serve_process() as (app_url, _),
    ):
        browser = launch(pw)
        floor: list[float] = [first_chart(browser, floor_url)]  # warms the floor's server
        if not args.no_fresh:
            # The app's server has served nothing yet: this is the first start's lesson.
            out["fresh_lesson_s"] = first_chart(browser, page_url(app_url, "", True))
        floor = [first_chart(browser, floor_url) for _ in range(2)]
        times: dict[str, list[float]] = {p.url_path: [] for p in chosen}

        def visit(p: Any) -> float:
            url = page_url(app_url, p.url_path, p.default)
            return first_chart(browser, url, FIRST_OTHER.get(p.url_path, FIRST_CHART))

        for p in chosen:  # one visit each fills the server's caches
            visit(p)
        for _ in range(args.repeats):
            for p in chosen:
                floor.append(first_chart(browser, floor_url))
                times[p.url_path].append(visit(p))
        browser.close()

    f = statistics.median(floor)
    out["floor_s"] = f
    out["pages"] = {k: {"median_s": statistics.median(v), "all_s": v} for k, v in times.items()}
    print(f"floor (one heatmap): median {f:.2f} s of {len(floor)} visits")
    if "fresh_lesson_s" in out:
        r = out["fresh_lesson_s"] / f
        print(
            f"fresh server, the lesson: {out['fresh_lesson_s']:.2f} s = {r:.2f}× the floor "
            f"(target ≤ {TARGET_FRESH}×) {'ok' if r <= TARGET_FRESH else 'over'}"
        )
    print("\n| page | first chart, median (s) | × floor | within 1.3× |\n|---|---|---|---|")
    for p in chosen:
        m = out["pages"][p.url_path]["median_s"]
        ok = "yes" if m / f <= TARGET_WARM else "no"
        what = " (first code block: no chart)" if p.url_path in FIRST_OTHER else ""
        print(f"| {p.title}{what} | {m:.2f} | {m / f:.2f} | {ok} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
