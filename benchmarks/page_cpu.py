"""The server's CPU for one visit of each page, one student at a time: where a class's CPU goes.

Run: ``python benchmarks/page_cpu.py [--visits 10] [--root PATH]``

A fresh server (``python -m app.serve``, as ``make run`` starts it; ``--root``: the app of
another checkout, for a before/after in one sitting) and one protocol-level student
(``hall_client.Session``, no browser). The student opens Step through, tours every page of the
menu twice (filling the caches a first lecture fills, and past each page's first-paint run),
then visits each page ``--visits`` times in a row; the server's CPU time (user + system, from
``/proc`` or psutil) before and after each page's visits, divided by the visits, is that page's
CPU per visit. Printed: one row a page and the mean of the pages. Nothing else should run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "tests", ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.append(str(p))

from hall_client import Session  # noqa: E402
from measure import Sampler  # noqa: E402
from streamlit_server import serve_process  # noqa: E402


async def tour(url: str, pid: int, visits: int) -> dict[str, float]:
    """Milliseconds of server CPU per visit, by page title."""
    s = Session(url)
    cpu = Sampler(pid).cpu
    try:
        await s.open("/step-through", "budget=256&step=1000")
        for _ in range(2):
            for title in list(s.pages):
                await s.painted(await s.page(title))
        out = {}
        for title in list(s.pages):
            c0 = cpu()
            for _ in range(visits):
                await s.painted(await s.page(title))
            out[title] = (cpu() - c0) / visits * 1000
        return out
    finally:
        await s.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--visits", type=int, default=10, help="visits of each page (default: 10)")
    ap.add_argument("--root", type=Path, help="run the app of this checkout instead")
    args = ap.parse_args(argv)
    if args.visits < 1:
        raise SystemExit("--visits must be >= 1")
    root = (args.root or ROOT).resolve()  # the other checkout's app and library, our tools
    load = os.getloadavg()[0]
    with serve_process(env={"PYTHONPATH": str(root)}, cwd=root) as (url, proc):
        per = asyncio.run(tour(url, proc.pid, args.visits))
    print(f"server CPU per visit, {args.visits} visits a page (load average {load:.2f} at start)")
    print("| page | ms |\n|---|---|")
    for title, ms in per.items():
        print(f"| {title} | {ms:.1f} |")
    print(f"| mean of the {len(per)} | {sum(per.values()) / len(per):.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
