"""Where a menu click goes when the server is busy: the browser's websocket frames, click by click.

Run: ``python benchmarks/clicks.py [--browsers 6] [--students 60] [--rounds 2]``

``load.py`` counts a menu click as lost when the address bar has not changed 15 s after it, and
clicks again. Streamlit's frontend changes the address only when the server *starts* the new
page (its ``new_session`` message), so a click the server is slow to serve looks the same as a
click nobody sent. This tells them apart. While ``--students`` protocol-level students
(``hall.py``) load one server, ``--browsers`` Chromium pages click through the menu the way
``load.py``'s students do, and every websocket frame is decoded with Streamlit's own messages.
For each click: did the browser send the rerun ``BackMsg`` for that page (and when), did
another rerun follow it before the page started (the server keeps only the newest request's
page), when did the page's ``new_session`` arrive, and when did the address change.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[1]
# Appended, not prepended: benchmarks/app.py (a script) must never hide the app package.
for p in (ROOT, ROOT / "tests", ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.append(str(p))

import hall  # noqa: E402
from load import PAGES, idle  # noqa: E402
from measure import Sampler  # noqa: E402
from streamlit.proto.BackMsg_pb2 import BackMsg  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

LOST_AFTER = 15.0  # load.py's patience before a second click


class Frames:
    """One page's websocket traffic, decoded, with times."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str, str]] = []  # (t, page hash, fragment id) of reruns
        self.started: list[tuple[float, str]] = []  # (t, page hash) of new_session
        self.pages: dict[str, str] = {}  # title → hash

    def attach(self, ws: Any) -> None:
        def on_sent(payload: Any) -> None:
            if isinstance(payload, str):
                return
            m = BackMsg()
            m.ParseFromString(payload)
            if m.WhichOneof("type") == "rerun_script":
                rs = m.rerun_script
                self.sent.append((time.monotonic(), rs.page_script_hash, rs.fragment_id))

        def on_received(payload: Any) -> None:
            if isinstance(payload, str):
                return
            m = ForwardMsg()
            m.ParseFromString(payload)
            kind = m.WhichOneof("type")
            if kind == "new_session":
                self.started.append((time.monotonic(), m.new_session.page_script_hash))
            elif kind == "navigation":
                self.pages.update({p.page_name: p.page_script_hash for p in m.navigation.app_pages})

        ws.on("framesent", on_sent)
        ws.on("framereceived", on_received)


async def clicker(i: int, browser: Any, url: str, delay: float, rounds: int, out: list) -> None:
    await asyncio.sleep(delay)
    ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
    ctx.set_default_timeout(300_000)
    await ctx.route("**/plotly*.min.js", lambda route: route.abort())  # as load.py's light ones
    page = await ctx.new_page()
    frames = Frames()
    page.on("websocket", frames.attach)
    try:
        await page.goto(f"{url}/step-through?budget=256&step={3000 + i}")
        await page.wait_for_selector(".h2o-player[data-rendered]")
        await idle(page)
        for _ in range(rounds):
            for title, path in PAGES.items():
                link = page.get_by_role("link", name=title, exact=True).first
                t0 = time.monotonic()
                await link.click()
                rec: dict[str, Any] = {"student": i, "page": title, "t0": t0}
                try:
                    await page.wait_for_url(
                        lambda u, path=path: urlparse(u).path == path, timeout=LOST_AFTER * 1000
                    )
                except Exception:
                    rec["repeated"] = True
                    await link.click()
                    await page.wait_for_url(lambda u, path=path: urlparse(u).path == path)
                rec["url_s"] = time.monotonic() - t0
                await idle(page)
                target = frames.pages.get(title)
                sent = [s for s in frames.sent if s[0] >= t0 and s[1] == target]
                rec["sent_s"] = sent[0][0] - t0 if sent else None
                started = [s for s in frames.started if s[0] >= t0 and s[1] == target]
                rec["started_s"] = started[0][0] - t0 if started else None
                if sent and started:  # reruns sent between the click and the page's start
                    rec["others_between"] = [  # another page's rerun would replace this one
                        s
                        for s in frames.sent
                        if sent[0][0] < s[0] < started[0][0] and (s[1] != target or s[2])
                    ]
                out.append(rec)
    except Exception as e:
        out.append({"student": i, "error": f"{type(e).__name__}: {str(e)[:200]}"})
    finally:
        await ctx.close()


async def drive(url: str, args: argparse.Namespace) -> tuple[list, dict]:
    from playwright.async_api import async_playwright
    from streamlit_server import CHROMIUM, CHROMIUM_ARGS

    clicks: list = []
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            load = hall.drive(url, args.students, args.ramp, args.think, False, 0)
            clickers = [
                clicker(i, b, url, args.ramp * i / max(args.browsers, 1), args.rounds, clicks)
                for i in range(args.browsers)
            ]
            res = await asyncio.gather(load, *clickers)
        finally:
            await b.close()
    return clicks, res[0][0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--browsers", type=int, default=6, help="Chromium pages clicking (6)")
    ap.add_argument("--students", type=int, default=60, help="protocol students loading (60)")
    ap.add_argument("--rounds", type=int, default=2, help="times through the menu (2)")
    ap.add_argument("--ramp", type=float, default=30.0, help="arrival spread, s (30)")
    ap.add_argument("--think", type=float, default=1.0, help="protocol students' reading, s")
    args = ap.parse_args()
    from streamlit_server import serve_process

    with serve_process() as (url, proc), Sampler(proc.pid) as s:
        load0 = s.load()
        clicks, load_out = asyncio.run(drive(url, args))
        load_peak = s.load_peak
    done = [c for c in clicks if "error" not in c]
    rep = [c for c in done if c.get("repeated")]
    print(f"load average {load0:.1f} at the start, {load_peak:.1f} at the peak")
    print(f"protocol students: {load_out['done']} of {args.students} done")
    print(f"menu clicks: {len(done)}, repeated after {LOST_AFTER:g} s: {len(rep)}")
    never_sent = [c for c in done if c["sent_s"] is None]
    print(f"clicks whose rerun the browser never sent: {len(never_sent)}")
    overtaken = [c for c in done if c.get("others_between")]
    print(f"clicks overtaken by another page's rerun before their page started: {len(overtaken)}")
    for name in ("sent_s", "started_s", "url_s"):
        xs = [c[name] for c in done if c.get(name) is not None]
        if xs:
            print(
                f"  click → {name[:-2]:8s} p50 {statistics.median(xs):6.2f}  max {max(xs):6.2f} s"
            )
    for c in rep:
        print(
            f"  repeated: student {c['student']} {c['page']!r}: BackMsg after "
            f"{c['sent_s'] if c['sent_s'] is None else round(c['sent_s'], 2)} s, page started "
            f"after {c['started_s'] if c['started_s'] is None else round(c['started_s'], 1)} s"
        )
    for c in clicks:
        if "error" in c:
            print(f"  error: {c}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
