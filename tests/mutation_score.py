"""The mutation score of the core, per module, from mutmut's results (``make mutate`` prints it).

Reads ``mutants/**/*.py.meta`` (mutmut 3 writes one per mutated file, with each mutant's exit
code) and prints a markdown table: killed / total per module of the core, with the survivors'
names under it. A timeout counts as killed (the mutant made the tests hang: they noticed); a
mutant no test reaches ("no tests") counts as surviving. Run from the repository root:
``python tests/mutation_score.py [--survivors]``.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

#: The core, as the README reports it: a folder counts as one module.
MODULES = (
    "h2o/policies/",
    "h2o/bank/",
    "h2o/replay.py",
    "h2o/trace.py",
    "h2o/trace_npz.py",
    "h2o/alloc/",
    "app/player/stepper.py",
    "app/state.py",
)
KILLED = {1, 3, 36, 24, -24, 152, 255, -6, -9, -11}  # failed, pytest's internal error, timeouts,
# and a run the mutant crashed (abort, kill, segfault: a numba loop writing past its array)
NOT_RUN = {None, 2, 34}  # not checked yet, interrupted, skipped


def module_of(path: str) -> str | None:
    return next((m for m in MODULES if path == m or path.startswith(m)), None)


def scores(root: Path = Path("mutants")) -> dict[str, dict[str, list[str]]]:
    """Per module: the mutants ``killed``, ``survived`` and ``not run``, by name."""
    out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for meta in sorted(root.rglob("*.py.meta")):
        module = module_of(meta.relative_to(root).as_posix().removesuffix(".meta"))
        if module is None:
            continue
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            kind = "killed" if code in KILLED else "not run" if code in NOT_RUN else "survived"
            out[module][kind].append(name)
    return out


def table(results: dict[str, dict[str, list[str]]], survivors: bool = False) -> str:
    lines = ["| module | killed / total | % |", "| --- | --- | --- |"]
    for module in MODULES:
        r = results.get(module)
        if r is None:
            continue
        killed, total = len(r["killed"]), len(r["killed"]) + len(r["survived"])
        pct = f"{100 * killed / total:.1f}" if total else "–"
        left = f" ({len(r['not run'])} not run)" if r["not run"] else ""
        lines.append(f"| `{module}` | {killed} / {total}{left} | {pct} |")
    if survivors:
        for module in MODULES:
            for name in sorted(results.get(module, {}).get("survived", [])):
                lines.append(f"    survived: {name}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(scores(), survivors="--survivors" in sys.argv))
