"""Server time of a step click, and figure payload sizes, in the classroom app.

Run: ``python benchmarks/app.py [--clicks 15]``

Drives the app headlessly with ``streamlit.testing`` (the same script runs as under
``streamlit run``): opens Step through on the canonical trace at step 2000 (H2O vs StreamingLLM,
budget 256), warms it with three clicks, then clicks "next step" ``--clicks`` times. Reported:

* the server time of the step view per click, as the app measures it itself (the body of the
  step fragment, ``time.perf_counter``; shown under the view and kept in ``step__ms``);
* the wall time of each whole AppTest rerun (the full script, not only the fragment);
* the largest Plotly payload on every page, in bytes, at the default settings and, for Step
  through, at the heaviest (all positions, a 256-step detail window).

Medians, because the machine is shared; the target is <= 150 ms a click and <= 1.5 MB a figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")
PAGES = [
    "views/step_through.py",
    "views/window_explorer.py",
    "views/stale_spike.py",
    "views/all_policies.py",
    "views/real_model.py",
    "views/how_it_works.py",
]


def open_app(**query: object) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=300)
    for k, v in query.items():
        at.query_params[k] = str(v)
    at.run()
    if at.exception:
        raise SystemExit(f"the app raised: {[e.value for e in at.exception]}")
    return at


def largest_payload(at: AppTest) -> int:
    return max((len(c.proto.spec.encode()) for c in at.get("plotly_chart")), default=0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clicks", type=int, default=15)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))

    at = open_app(step=2000)
    for _ in range(3):
        at.button(key="step__next").click().run()
    at.session_state["step__ms"] = []
    walls = []
    for _ in range(args.clicks):
        t0 = time.perf_counter()
        at.button(key="step__next").click().run()
        walls.append((time.perf_counter() - t0) * 1e3)
    server = list(at.session_state["step__ms"])
    print(f"step click on the canonical trace, {args.clicks} clicks after 3 to warm up:")
    print(
        f"  server time of the step view: median {statistics.median(server):.0f} ms "
        f"(min {min(server):.0f}, max {max(server):.0f})"
    )
    print(f"  whole-script rerun (AppTest wall time): median {statistics.median(walls):.0f} ms")

    print("largest figure payload per page (bytes):")
    for page in PAGES:
        at = open_app()
        at.switch_page(page).run()
        print(f"  {page:28s} {largest_payload(at):>10,d}")
    at = open_app(step=3000)
    at.session_state["step__rows"] = "all positions"
    at.session_state["step__width"] = 256
    at.run()
    print(f"  {'step through, heaviest view':28s} {largest_payload(at):>10,d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
