"""A class on one server: N students (default 30) against one ``streamlit run`` of the app.

Run: ``python benchmarks/load.py [--sessions 30] [--ramp 20] [--json]``

Starts the app the way the lecturer does (one server, ``tests/streamlit_server.py``) and drives
Debian's Chromium with Playwright: one browser context per student, arriving over ``--ramp``
seconds. A class brings thirty laptops; here every browser shares this machine's cores with the
server, so only ``--full`` students (default 3) draw everything and are timed in the page; the
others skip plotly.js for the player (the server does the same work for them: the same
payloads are computed and sent) so that thirty browsers do not starve the server they load.
Each student

1. opens Step through on the canonical trace from the lecturer's link at a step of their own
   (``?budget=256&step=1000+i``; ``--distinct``: ``?budget=200+i``) and waits for the player,
   then (``--full`` students) for every plot;
2. steps ten times with "+1" (timed inside the page, click → new step painted);
3. changes the budget in the sidebar to one of 128 / 512 / 1024 (``--distinct``: ``300+i``;
   timed: Enter → the player holds the new run);
4. opens every page in the menu (timed: click → the script finished), looking for tracebacks
   (``stException``) on each;
5. returns to Step through and checks that the budget and step it sees are its own — no other
   student's value (the cross-session leak check; the steps are unique per student).

Printed: the server's CPU (seconds, and share of one core over the run), its resident memory
before the class, at its peak and after every student has left, the percentiles of each timed
action, and every failure. The browsers run on the same machine as the server here (a class
brings its own laptops), so the in-page step times are an upper bound of what a student sees.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlparse

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.append(str(ROOT / "benchmarks"))  # after app/: benchmarks/app.py is a script

from measure import Sampler, pct  # noqa: E402
from streamlit_server import CHROMIUM, CHROMIUM_ARGS, PLAYER, serve_process  # noqa: E402

PAGES = {  # menu title → URL path
    "Lesson": "/",
    "recentWindow explorer": "/window-explorer",
    "Stale spike: H2O vs Scissorhands": "/stale-spike",
    "All policies": "/all-policies",
    "Real model": "/real-model",
    "Where should the budget go?": "/where-budget",
    "How it works": "/how-it-works",
    "Step through": "/step-through",
}

STEP_JS = """() => new Promise((resolve) => {
  const root = document.querySelector('.h2o-player');
  const want = String(Number(root.dataset.rendered) + 1);
  const t0 = performance.now();
  root.querySelector('[data-action="next"]').click();
  const check = () => root.dataset.rendered === want
    ? requestAnimationFrame(() => resolve(performance.now() - t0))
    : requestAnimationFrame(check);
  requestAnimationFrame(check);
})"""

TIMEOUT_MS = 300_000

PLOTS_JS = f"document.querySelectorAll('{PLAYER} .js-plotly-plot .main-svg').length >= 4"

IDLE_JS = """() => {
  const app = document.querySelector('[data-testid="stApp"]');
  return app && app.dataset.testConnectionState === 'CONNECTED'
    && !['running', 'rerunRequested', 'initial'].includes(app.dataset.testScriptState);
}"""


async def idle(page, timeout: float = TIMEOUT_MS / 1000) -> None:
    """Connected and the script finished, for 0.5 s on end."""
    deadline = time.monotonic() + timeout
    since = None
    while time.monotonic() < deadline:
        if await page.evaluate(IDLE_JS):
            since = since or time.monotonic()
            if time.monotonic() - since > 0.5:
                return
        else:
            since = None
        await page.wait_for_timeout(100)
    raise TimeoutError("the script did not finish")


def settings(i: int, distinct: bool) -> tuple[int, int, int]:
    """Student ``i``'s link budget, step, and the budget they change to. A class follows the
    lecturer's link (budget 256) and tries one of three others; ``distinct``: everyone their
    own (the worst case for the server's caches)."""
    if distinct:
        return 200 + i, 1000 + i, 300 + i
    return 256, 1000 + i, (128, 512, 1024)[i % 3]


async def student(
    i: int, full: bool, distinct: bool, browser, url: str, delay: float, out: dict
) -> None:
    await asyncio.sleep(delay)
    budget, step, new_budget = settings(i, distinct)
    ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.set_default_timeout(TIMEOUT_MS)
    if not full:
        await ctx.route("**/plotly*.min.js", lambda route: route.abort())
    page = await ctx.new_page()
    failures = out["failures"]
    try:
        t0 = time.monotonic()
        await page.goto(f"{url}/step-through?budget={budget}&step={step}")
        await page.wait_for_selector(f"{PLAYER}[data-rendered]")
        out["open" if full else "open_light"].append(time.monotonic() - t0)
        if full:
            await page.wait_for_function(PLOTS_JS)
            out["plots"].append(time.monotonic() - t0)
            for _ in range(10):
                out["step"].append(await page.evaluate(STEP_JS) / 1000)
            step += 10

        box = page.get_by_role("spinbutton", name="budget — slots in the cache")
        t0 = time.monotonic()
        await box.fill(str(new_budget))
        await box.press("Enter")
        await page.wait_for_function(
            f"(() => {{ const p = document.querySelector('{PLAYER}');"
            f" return p && p.__h2o && p.__h2o.h && p.__h2o.h.budget === {new_budget}; }})()",
        )
        out["budget"].append(time.monotonic() - t0)
        # The server learns the step the student left on once they stop interacting.
        await idle(page)

        for title, path in PAGES.items():
            t0 = time.monotonic()
            link = page.get_by_role("link", name=title, exact=True).first
            await link.click()
            try:  # the address changes at once, whatever the server is doing
                await page.wait_for_url(
                    lambda u, path=path: urlparse(u).path == path, timeout=15_000
                )
            except Exception:
                out["retried"] += 1  # a click lost under load: a student clicks again
                await link.click()
                await page.wait_for_url(lambda u, path=path: urlparse(u).path == path)
            await page.wait_for_timeout(200)
            await idle(page)
            out["page"].append(time.monotonic() - t0)
            out["by_page"].setdefault(title, []).append(time.monotonic() - t0)
            if await page.locator('[data-testid="stException"]').count():
                failures.append(f"student {i}: a traceback on {title}")

        await page.wait_for_selector(f"{PLAYER}[data-rendered]")
        q = {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}
        seen = (q.get("budget"), await page.get_attribute(PLAYER, "data-rendered"))
        if seen != (str(new_budget), str(step)):
            failures.append(f"student {i}: expected budget {new_budget} at step {step}, saw {seen}")
        out["done"] += 1
    except Exception as e:  # every failure is counted and reported
        failures.append(f"student {i}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    finally:
        await ctx.close()


async def drive(url: str, n: int, full: int, distinct: bool, ramp: float) -> dict:
    from playwright.async_api import async_playwright

    out = {
        "by_page": {},
        "open": [],
        "open_light": [],
        "plots": [],
        "step": [],
        "budget": [],
        "page": [],
        "failures": [],
        "done": 0,
        "retried": 0,
    }
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            await asyncio.gather(
                *(
                    student(i, i < full, distinct, browser, url, ramp * i / max(n - 1, 1), out)
                    for i in range(n)
                )
            )
        finally:
            await browser.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=30, help="students (default: 30)")
    ap.add_argument(
        "--distinct",
        action="store_true",
        help="every student their own budgets (default: the lecturer's link, then 1 of 3)",
    )
    ap.add_argument("--full", type=int, default=3, help="students timed in full (default: 3)")
    ap.add_argument("--ramp", type=float, default=60.0, help="arrival spread, s (default: 60)")
    ap.add_argument("--settle", type=float, default=15.0, help="wait after they leave, s")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args()
    if args.sessions < 1:
        ap.error("--sessions must be at least 1")

    with serve_process() as (url, proc), Sampler(proc.pid) as s:
        time.sleep(2)
        before, cpu0, t0 = s.rss(), s.cpu(), time.monotonic()
        full = min(args.full, args.sessions)
        out = asyncio.run(drive(url, args.sessions, full, args.distinct, args.ramp))
        wall, cpu = time.monotonic() - t0, s.cpu() - cpu0
        time.sleep(args.settle)  # sessions end when their websockets close
        after = s.rss()
        peak = max(s.peak, after)

    mb = 1 / 2**20
    res = {
        "sessions": args.sessions,
        "full": min(args.full, args.sessions),
        "distinct": args.distinct,
        "completed": out["done"],
        "menu_clicks_repeated": out["retried"],
        "failures": out["failures"],
        "wall_s": round(wall, 1),
        "server_cpu_s": round(cpu, 1),
        "server_cpu_share_of_one_core": round(cpu / wall, 2),
        "rss_mb": {
            "before": round(before * mb),
            "peak": round(peak * mb),
            "after": round(after * mb),
        },
        "rss_per_session_mb": round((peak - before) * mb / args.sessions, 1),
    }
    for name in ("open", "plots", "step", "open_light", "budget", "page"):
        xs = out[name]
        if xs:
            res[f"{name}_s"] = {
                "n": len(xs),
                "p50": round(statistics.median(xs), 3),
                "p90": round(pct(xs, 0.9), 3),
                "p99": round(pct(xs, 0.99), 3),
                "max": round(max(xs), 3),
            }
    res["page_p50_s"] = {
        t: round(statistics.median(xs), 3) for t, xs in out["by_page"].items() if xs
    }
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"{res['sessions']} students, {res['completed']} completed in {res['wall_s']} s")
        print(
            f"server CPU {res['server_cpu_s']} s ({res['server_cpu_share_of_one_core']:.0%} of "
            f"one core); RSS before {res['rss_mb']['before']} MB, peak {res['rss_mb']['peak']} MB, "
            f"after {res['rss_mb']['after']} MB ({res['rss_per_session_mb']} MB per student at "
            "the peak)"
        )
        labels = {
            "open": "open Step through (link → player)",
            "plots": "… and every plot drawn",
            "open_light": "open Step through, the other students",
            "step": '"+1" click → step painted',
            "budget": "budget change → new run shown",
            "page": "open a page (click → script done)",
        }
        for name, label in labels.items():
            if (r := res.get(f"{name}_s")) is not None:
                print(
                    f"  {label:38s} n={r['n']:4d}  p50 {r['p50']:.3f}  p90 {r['p90']:.3f}  "
                    f"p99 {r['p99']:.3f}  max {r['max']:.3f} s"
                )
        print("  page p50: " + ", ".join(f"{t} {v:.2f} s" for t, v in res["page_p50_s"].items()))
        print(f"menu clicks that had to be repeated: {res['menu_clicks_repeated']}")
        print(f"failures: {len(res['failures'])}")
        for f in res["failures"]:
            print(f"  {f}")
    return 1 if res["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
