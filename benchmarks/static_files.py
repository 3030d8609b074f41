"""The server's CPU for each of Streamlit's static files: the app's server against Streamlit's own.

Run: ``python benchmarks/static_files.py [--rounds 3] [--connections 6]``

A new browser fetches about a hundred of Streamlit's scripts, styles and fonts while its first
page's websocket is open, from the same event loop. Two servers run side by side: the app
(``python -m app.serve``, as ``make run`` starts it: the files answered from memory,
``app/static_files.py``) and the benchmarks' floor page under ``streamlit run`` (Streamlit's own
static handler). Each server gets every file of Streamlit's ``static/`` folder, ``--rounds``
times, over ``--connections`` kept-alive connections at once (a browser opens six); the servers
alternate round by round, so the machine's load falls on both. Printed: each server's CPU time
(user + system, from ``/proc`` or psutil) per file, its wall time per round, and the ratios,
measured in one run. Nothing else should run.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "tests", ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.append(str(p))

from measure import Sampler  # noqa: E402
from streamlit import file_util  # noqa: E402
from streamlit_server import serve_process  # noqa: E402

FLOOR = ROOT / "benchmarks" / "pages" / "floor.py"


def files() -> list[str]:
    """Every file of Streamlit's ``static/`` folder, as URL paths."""
    static = Path(file_util.get_static_dir())
    return sorted(
        "/" + str(p.relative_to(static)) for p in (static / "static").rglob("*") if p.is_file()
    )


def fetch_all(url: str, paths: list[str], connections: int) -> int:
    """Every path in ``paths`` over ``connections`` kept-alive connections; the bytes read."""
    parts = urllib.parse.urlsplit(url)

    def worker(share: list[str]) -> int:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        n = 0
        for path in share:
            conn.request("GET", parts.path + path)
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                raise RuntimeError(f"{url}{path}: {r.status}")
            n += len(body)
        conn.close()
        return n

    shares = [paths[i::connections] for i in range(connections)]
    with ThreadPoolExecutor(connections) as pool:
        return sum(pool.map(worker, shares))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--connections", type=int, default=6)
    args = ap.parse_args()
    paths = files()
    with serve_process() as (app_url, app_proc), serve_process(script=FLOOR) as (st_url, st_proc):
        servers = {"app (from memory)": (app_url, app_proc), "Streamlit's own": (st_url, st_proc)}
        cpu: dict[str, list[float]] = {k: [] for k in servers}
        wall: dict[str, list[float]] = {k: [] for k in servers}
        for url, _ in servers.values():  # a first round each: the page cache, and memory
            fetch_all(url, paths, args.connections)
        size = 0
        for _ in range(args.rounds):
            for name, (url, proc) in servers.items():
                sampler = Sampler(proc.pid)
                c0, t0 = sampler.cpu(), time.perf_counter()
                size = fetch_all(url, paths, args.connections)
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append((sampler.cpu() - c0) / len(paths))
    print(
        f"{len(paths)} files ({size / 2**20:.1f} MB) a round, {args.rounds} rounds, "
        f"{args.connections} connections, machine load {Sampler.load():.2f}\n"
    )
    print("| server | CPU per file, median (ms) | wall per round, median (s) |\n|---|---|---|")
    for name in servers:
        print(
            f"| {name} | {1000 * statistics.median(cpu[name]):.2f} "
            f"| {statistics.median(wall[name]):.2f} |"
        )
    a, b = (statistics.median(cpu[k]) for k in servers)
    wa, wb = (statistics.median(wall[k]) for k in servers)
    print(f"\nStreamlit's own / the app: CPU {b / a:.1f}×, wall {wb / wa:.1f}×")


if __name__ == "__main__":
    main()
