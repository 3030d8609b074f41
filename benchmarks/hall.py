"""A lecture hall against one server, measured without browsers: protocol-level students.

Run: ``python benchmarks/hall.py [--classes 30,100,300] [--ramp 60] [--think 2] [--browsers 0]``

Each class size gets a fresh ``streamlit run`` of the app (``tests/streamlit_server.py``; or
``--replicas N``: N of them behind the HAProxy of ``deploy/proxy.py``; or ``--url``: a server
already running), and its students arrive evenly over ``--ramp`` seconds. A student is
:class:`hall_client.Session` — Streamlit's websocket protocol with Streamlit's own message
classes, no browser — and does what ``load.py``'s Chromium students do:

1. **open**: Step through from the lecturer's link, ``?budget=256&step=1000+i`` (``--distinct``:
   ``budget=200+i``), GET to ``script_finished``;
2. **budget**: the sidebar's budget changed to one of 128 / 512 / 1024 (``--distinct``:
   ``300+i``), the widget's new value to ``script_finished``;
3. **range**: the player's request for its next range (its report at the last step of the loaded
   range, a rerun of its fragment), to the fragment's end;
4. **page**: every page of the menu, in order, ending on Step through.

Between actions a student reads for ``--think`` seconds (uniform 0.5–1.5×). Every reply is
checked: no exception and no error on the page, the page that was asked for, and on Step through
this student's own budget and step in the player's payload and in the query string (steps are
unique per student, so another session's view would show). Timed: request → the run's
``script_finished``. Printed: per action p50 / p95 / max, the server's CPU and RSS, bytes sent
to the students, the machine's load average (it is shared: the numbers are noisy), and the
largest class whose page opens and budget changes stay within ``--target`` (2 s) at p95, and
the server's CPU per student action (after ``--warm`` students, not counted, have filled the
caches a first lecture fills).
``--browsers N`` adds N real Chromium students (``load.py``'s, drawing everything) to each class.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

ROOT = Path(__file__).resolve().parents[1]
# Appended, not prepended: benchmarks/app.py (a script) must never hide the app package.
for p in (ROOT, ROOT / "tests", ROOT / "benchmarks"):
    if str(p) not in sys.path:
        sys.path.append(str(p))

from hall_client import Run, Session  # noqa: E402
from measure import Sampler, pct  # noqa: E402

ACTIONS = ("open", "budget", "range", "page")
LABELS = {
    "open": "open Step through from the link",
    "budget": "budget change → new run",
    "range": "player's next range",
    "page": "open a page from the menu",
}
BUDGET_LABEL = "budget — slots in the cache"


def settings(i: int, distinct: bool) -> tuple[int, int, int]:
    """Student ``i``'s link budget, step, and the budget they change to (``load.py``'s)."""
    from load import settings as load_settings

    return load_settings(i, distinct)


def _query(run: Run) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(run.query or "").items()}


def check_view(run: Run, budget: int, step: int, what: str, query: bool = True) -> list[str]:
    """This student's own view: their budget and step in the payload (and the link)."""
    problems = []
    head = run.header()
    if head is None:
        return [f"{what}: no player payload"]
    if head["budget"] != budget or head["start"]["step"] != step:
        problems.append(
            f"{what}: expected budget {budget} at step {step}, the payload holds budget "
            f"{head['budget']} at step {head['start']['step']}"
        )
    q = _query(run)
    if query and (q.get("budget"), q.get("step")) != (str(budget), str(step)):
        problems.append(f"{what}: the link says {run.query!r}, not budget {budget} step {step}")
    return problems


def check_run(run: Run, what: str) -> list[str]:
    out = [f"{what}: exception {e}" for e in run.exceptions]
    out += [f"{what}: error {e}" for e in run.errors]
    if run.not_found is not None:
        out.append(f"{what}: page not found {run.not_found!r}")
    return out


async def student(
    i: int, url: str, delay: float, think: float, distinct: bool, out: dict[str, Any]
) -> None:
    await asyncio.sleep(delay)
    rng = random.Random(i)
    budget, step, new_budget = settings(i, distinct)
    s = Session(url)
    fails: list[str] = out["failures"]

    def record(action: str, run: Run, problems: list[str], title: str = "") -> None:
        out[action].append(run.seconds)
        out["bytes"][action].append(run.nbytes)
        if title:
            out["by_page"].setdefault(title, []).append(run.seconds)
        fails.extend(f"student {i}: {p}" for p in problems)

    async def pause() -> None:
        await asyncio.sleep(think * rng.uniform(0.5, 1.5))

    try:
        run = await s.open("/step-through", f"budget={budget}&step={step}")
        record("open", run, check_run(run, "open") + check_view(run, budget, step, "open"))
        await pause()

        box = run.widget("number_input", label=BUDGET_LABEL)
        run = await s.set_widget(box, int_value=new_budget)
        record(
            "budget", run, check_run(run, "budget") + check_view(run, new_budget, step, "budget")
        )
        await pause()

        head = run.header()
        player = run.widget("bidi_component", key="step_player")
        target = head["range"][1] - 1  # played to the edge of the loaded range
        view = {"step": target, **{k: v for k, v in head["start"].items() if k != "step"}}
        run = await s.report(player.id, run.fragments[player.id], view)
        problems = check_run(run, "range")
        got = run.header()
        if got is None:
            problems.append("range: no new range sent")
        elif not got["range"][0] <= target < got["range"][1] or got["budget"] != new_budget:
            problems.append(f"range: got {got['range']} at budget {got['budget']} for {target}")
        record("range", run, problems)
        step = target
        await pause()

        for title in s.pages:  # the menu, in order; Step through last
            if title == "Step through":
                continue
            run = await s.page(title)
            problems = check_run(run, title)
            if run.page_hash != s.pages[title]:
                problems.append(f"{title}: another page ran ({run.page_hash})")
            rest = await s.painted(run)  # the rest of the page once its first chart is on screen
            if rest is not None:
                problems += check_run(rest, f"{title} after its first paint")
                rest.seconds += run.seconds  # the page is done when its last part is
                run = rest
            record("page", run, problems, title)
            await pause()
        run = await s.page("Step through")
        problems = check_run(run, "Step through") + check_view(run, new_budget, step, "return")
        record("page", run, problems, "Step through")
        out["done"] += 1
    except Exception as e:  # every failure is counted and reported
        fails.append(f"student {i}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    finally:
        out["received"] += s.received
        out["sent"] += s.sent
        await s.close()


async def browsers(url: str, n: int, first: int, ramp: float, distinct: bool) -> dict[str, Any]:
    """``n`` Chromium students (``load.py``'s, drawing everything), numbered from ``first`` so
    their steps differ from every protocol student's."""
    from load import student as browser_student
    from playwright.async_api import async_playwright
    from streamlit_server import CHROMIUM, CHROMIUM_ARGS

    out: dict[str, Any] = {
        k: [] for k in ("open", "open_light", "plots", "step", "budget", "page", "failures")
    }
    out |= {"by_page": {}, "done": 0, "retried": 0}
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            await asyncio.gather(
                *(
                    browser_student(first + k, True, distinct, b, url, ramp * (k + 0.5) / n, out)
                    for k in range(n)
                )
            )
        finally:
            await b.close()
    return out


async def drive(
    url: str, n: int, ramp: float, think: float, distinct: bool, n_browsers: int
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    out: dict[str, Any] = {a: [] for a in ACTIONS}
    out |= {"bytes": {a: [] for a in ACTIONS}, "by_page": {}, "failures": []}
    out |= {"done": 0, "received": 0, "sent": 0}
    tasks = [student(i, url, ramp * i / max(n - 1, 1), think, distinct, out) for i in range(n)]
    if n_browsers:
        both = await asyncio.gather(
            asyncio.gather(*tasks), browsers(url, n_browsers, n, ramp, distinct)
        )
        return out, both[1]
    await asyncio.gather(*tasks)
    return out, None


@contextlib.contextmanager
def servers(url: str | None, replicas: int) -> Iterator[tuple[str, list[int]]]:
    """The server(s) a class meets: yours (``url``), one fresh one, or replicas behind HAProxy."""
    if url:
        yield url, []
        return
    if replicas > 1:
        from deploy.proxy import deployment

        with deployment(replicas) as d:
            yield d.url, d.pids
        return
    from streamlit_server import serve_process

    with serve_process() as (u, proc):
        yield u, [proc.pid]


def stats(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "p50": round(statistics.median(xs), 3),
        "p95": round(pct(xs, 0.95), 3),
        "max": round(max(xs), 3),
    }


def one_class(args: argparse.Namespace, n: int) -> dict[str, Any]:
    with servers(args.url, args.replicas) as (url, pids), Sampler(pids) as s:
        time.sleep(1)
        if args.warm:  # the caches a first lecture fills, not counted
            asyncio.run(drive(url, args.warm, 2.0, 0.5, args.distinct, 0))
        before, cpu0, t0 = s.rss(), s.cpu(), time.monotonic()
        load0, mine0 = s.load(), time.process_time()
        out, bout = asyncio.run(drive(url, n, args.ramp, args.think, args.distinct, args.browsers))
        wall, cpu = time.monotonic() - t0, s.cpu() - cpu0
        peak, load1 = max(s.peak, s.rss()), s.load()
    mb = 1 / 2**20
    res: dict[str, Any] = {
        "students": n,
        "completed": out["done"],
        "failures": out["failures"],
        "wall_s": round(wall, 1),
        "server_cpu_s": round(cpu, 1) if pids else None,
        "server_cpu_share": round(cpu / wall, 2) if pids else None,
        "actions": sum(len(out[a]) for a in ACTIONS),
        "server_cpu_ms_per_action": (
            round(1000 * cpu / max(1, sum(len(out[a]) for a in ACTIONS)), 1) if pids else None
        ),
        "rss_mb": {"before": round(before * mb), "peak": round(peak * mb)} if pids else None,
        "client_cpu_s": round(time.process_time() - mine0, 1),  # the students' own process
        "mb_to_students": round(out["received"] / 1e6, 1),
        "mb_from_students": round(out["sent"] / 1e6, 2),
        "load_avg": {
            "start": round(load0, 2),
            "peak": round(s.load_peak, 2),
            "end": round(load1, 2),
        },
    }
    for a in ACTIONS:
        if out[a]:
            res[a] = stats(out[a]) | {"kb_p50": round(statistics.median(out["bytes"][a]) / 1e3)}
    res["page_p50_s"] = {t: round(statistics.median(v), 3) for t, v in out["by_page"].items()}
    if bout is not None:
        res["browsers"] = {
            "students": args.browsers,
            "completed": bout["done"],
            "failures": bout["failures"],
            "menu_clicks_repeated": bout["retried"],
            **{k: stats(bout[k]) for k in ("open", "plots", "step", "budget", "page") if bout[k]},
        }
    return res


def within(res: dict[str, Any], target: float) -> bool:
    return (
        not res["failures"]
        and res["completed"] == res["students"]
        and all(a in res and res[a]["p95"] <= target for a in ("open", "budget"))
    )


def table(results: list[dict[str, Any]], target: float) -> str:
    head = (
        "| students | completed, failures | open p50 / p95 / max | budget p50 / p95 / max | "
        "range p50 / p95 / max | page p50 / p95 / max | server CPU (share of a core) | "
        "CPU per action | RSS before / peak | MB sent | load avg start / peak | within 2 s |\n"
        + "|---" * 12
        + "|\n"
    )

    def cell(r: dict[str, Any], a: str) -> str:
        return f"{r[a]['p50']:.2f} / {r[a]['p95']:.2f} / {r[a]['max']:.2f}" if a in r else "—"

    rows = []
    for r in results:
        cpu = f"{r['server_cpu_s']} s ({r['server_cpu_share']:.0%})" if r["server_cpu_s"] else "—"
        rss = f"{r['rss_mb']['before']} / {r['rss_mb']['peak']} MB" if r["rss_mb"] else "—"
        per = r["server_cpu_ms_per_action"]
        per_action = f"{per} ms" if per is not None else "—"
        rows.append(
            f"| {r['students']} | {r['completed']}, {len(r['failures'])} | {cell(r, 'open')} | "
            f"{cell(r, 'budget')} | {cell(r, 'range')} | {cell(r, 'page')} | {cpu} | "
            f"{per_action} | {rss} | "
            f"{r['mb_to_students']} | {r['load_avg']['start']} / {r['load_avg']['peak']} | "
            f"{'yes' if within(r, target) else 'no'} |"
        )
    return head + "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--classes", default="30,100,300", help="class sizes (default: 30,100,300)")
    ap.add_argument("--ramp", type=float, default=60.0, help="arrival spread, s (default: 60)")
    ap.add_argument("--think", type=float, default=2.0, help="reading time per action, s")
    ap.add_argument("--distinct", action="store_true", help="every student their own budgets")
    ap.add_argument("--browsers", type=int, default=0, help="real Chromium students per class")
    ap.add_argument("--replicas", type=int, default=1, help="app processes behind HAProxy")
    ap.add_argument("--url", help="a running server (or proxy) instead of a fresh one")
    ap.add_argument("--target", type=float, default=2.0, help="p95 target, s (default: 2)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument(
        "--warm", type=int, default=5, help="students first, not counted, to fill the caches"
    )
    args = ap.parse_args()
    sizes = [int(x) for x in args.classes.split(",")]
    if min(sizes) < 1 or args.ramp < 0 or args.think < 0:
        ap.error("class sizes must be positive, --ramp and --think not negative")

    results = []
    for n in sizes:
        r = one_class(args, n)
        results.append(r)
        print(
            f"\n{n} students: {r['completed']} completed in {r['wall_s']} s, "
            f"load average {r['load_avg']}; server CPU {r['server_cpu_s']} s, the students' "
            f"own process {r['client_cpu_s']} s"
        )
        for a in ACTIONS:
            if a in r:
                print(
                    f"  {LABELS[a]:34s} n={r[a]['n']:5d}  p50 {r[a]['p50']:.3f}  p95 "
                    f"{r[a]['p95']:.3f}  max {r[a]['max']:.3f} s  ({r[a]['kb_p50']} kB p50)"
                )
        print("  page p50: " + ", ".join(f"{t} {v:.2f} s" for t, v in r["page_p50_s"].items()))
        if "browsers" in r:
            print(f"  browsers: {json.dumps(r['browsers'])}")
        for f in r["failures"][:20]:
            print(f"  FAIL {f}")
        if len(r["failures"]) > 20:
            print(f"  … {len(r['failures']) - 20} more failures")
        sys.stdout.flush()
    print()
    print(table(results, args.target))
    ok = [r["students"] for r in results if within(r, args.target)]
    print(
        f"\nLargest class measured whose page opens and budget changes within {args.target:g} s "
        f"at p95: {max(ok) if ok else 'none of these'}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 1 if any(r["failures"] for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
