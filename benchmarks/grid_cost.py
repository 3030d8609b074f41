"""What the needle grid's cells cost, row by row against several rows as one job.

    .venv/bin/python benchmarks/grid_cost.py [--lengths 1024] [--depths 0,25,50,75,100]
        [--rows full,kivi4,kivi2,quest@128,snapkv@128,knorm@128,kvzip@128,
                expected-attention@128] [--repeats 1]

For each length, the cells (one needle a depth, the grid's own: ``cell_needles``) of every row
of ``--rows`` are scored two ways in the same repeat, with numpy's BLAS held to one thread (as
the grid's workers run):

* **row by row** — :func:`h2o.model.answer.score_cells` of each row: the haystack its prompts
  share read once a row (the grid's jobs before rows shared them);
* **one job** — :func:`h2o.model.answer.score_rows` of all the rows: each prompt read once under
  the full cache for every row that reads it so (:func:`~h2o.model.answer.reads_prompt_as_full`;
  a row that does not is scored by ``score_cells`` there too).

One cell of each way runs first, untimed (a row's first call sets things up). The scores must
agree bit for bit (checked). Printed: CPU and wall seconds per cell of each way
(medians over ``--repeats``) and their ratio (one job / row by row, the median of the ratios
within a repeat); then the shipped grid (``traces/results/needle-grid.jsonl``, whose lines'
``seconds`` are what each cell cost when it was run): its CPU hours, the part of them spent on
rows that read a prompt as the full cache does, and that part scaled by the ratio measured at
the nearest length — the grid's cost had those rows run as one job a length.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from h2o.model.answer import (  # noqa: E402
    AnswerScore,
    reads_prompt_as_full,
    score_cells,
    score_rows,
)
from h2o.model.rows import Row  # noqa: E402
from h2o.needle.cells import MAX_NEW, cell_needles, worker_model  # noqa: E402
from h2o.needle.haystack import build_prompt  # noqa: E402
from h2o.needle.needles import needle  # noqa: E402

GRID = ROOT / "traces" / "results" / "needle-grid.jsonl"
ROWS = "full,kivi4,kivi2,quest@128,snapkv@128,knorm@128,kvzip@128,expected-attention@128"


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def _same(a: list[AnswerScore], b: list[AnswerScore], label: str) -> None:
    for x, y in zip(a, b, strict=True):
        if (x.token_logprobs, x.produced_ids, x.held, x.kv_bytes, x.read_bytes) != (
            y.token_logprobs,
            y.produced_ids,
            y.held,
            y.kv_bytes,
            y.read_bytes,
        ):
            raise SystemExit(f"{label}: the scores of one job differ from the row's alone")


def measure(model, rows: list[Row], length: int, depths: list[int], repeats: int) -> dict:
    """CPU and wall seconds per cell, row by row and as one job, and the ratios per repeat."""
    built = [
        build_prompt(model.encode, needle(cell_needles(length, d)[0]), length, d) for d in depths
    ]
    cells = [(p.ids, p.answer_ids, p.needle_span) for p in built]
    n = len(rows) * len(cells)
    got: dict[str, list[float]] = {"rows_cpu": [], "rows_wall": [], "job_cpu": [], "job_wall": []}
    ratios: list[float] = []
    # a first call of some rows sets things up (KVzip's took twice its later calls): not timed
    score_rows(model, cells[:1], rows, max_new=MAX_NEW)
    for r in rows:
        score_cells(model, cells[:1], r, max_new=MAX_NEW)
    for _ in range(repeats):
        c0, w0 = _cpu(), time.perf_counter()
        alone = {r.label: score_cells(model, cells, r, max_new=MAX_NEW) for r in rows}
        c1, w1 = _cpu(), time.perf_counter()
        job = score_rows(model, cells, rows, max_new=MAX_NEW)
        c2, w2 = _cpu(), time.perf_counter()
        for r in rows:
            _same(job[r.label], alone[r.label], r.label)
        got["rows_cpu"].append((c1 - c0) / n)
        got["rows_wall"].append((w1 - w0) / n)
        got["job_cpu"].append((c2 - c1) / n)
        got["job_wall"].append((w2 - w1) / n)
        ratios.append((c2 - c1) / (c1 - c0))
    out = {k: statistics.median(v) for k, v in got.items()}
    out["ratio"] = statistics.median(ratios)
    return out


def grid_hours(ratio_at: dict[int, float]) -> None:
    """The shipped grid's CPU hours, and with its qualifying rows run as one job a length."""
    meta = json.loads(Path(str(GRID) + ".meta.json").read_text(encoding="utf-8"))
    lines = [json.loads(s) for s in GRID.read_text(encoding="utf-8").splitlines() if s.strip()]
    shared = {r for r in meta["rows"] if reads_prompt_as_full(Row.parse(r))}
    total = sum(x["seconds"] for x in lines) / 3600
    part = {n: 0.0 for n in meta["lengths"]}
    for x in lines:
        if x["row"] in shared:
            part[int(x["length"])] += x["seconds"] / 3600
    near = {n: min(ratio_at, key=lambda m: (abs(m - n), m)) for n in part}
    saved = sum(h * (1 - ratio_at[near[n]]) for n, h in part.items())
    print(
        f"\nshipped grid: {len(lines)} cells, {len(meta['rows'])} rows, lengths "
        f"{meta['lengths']}: {total:.2f} CPU h (the lines' seconds)"
    )
    print(f"  rows that read a prompt as the full cache does: {len(shared)} of {len(meta['rows'])}")
    for n, h in part.items():
        print(f"  {n:>5} tokens: {h:.2f} h on them -> {h * ratio_at[near[n]]:.2f} h "
              f"(ratio measured at {near[n]})")  # fmt: skip
    print(f"  the grid: {total:.2f} h -> {total - saved:.2f} h as one job a length")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="1024")
    ap.add_argument("--depths", default="0,25,50,75,100")
    ap.add_argument("--rows", default=ROWS)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1)  # as the grid's workers run: one core a worker
    lengths = [int(x) for x in args.lengths.split(",")]
    depths = [int(x) for x in args.depths.split(",")]
    rows = [Row.parse(x) for x in args.rows.split(",")]
    model = worker_model()
    print(
        f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, load {os.getloadavg()[0]:.2f}; "
        f"rows {','.join(r.label for r in rows)} ({sum(map(reads_prompt_as_full, rows))} read a "
        f"prompt as the full cache); depths {args.depths}; {args.repeats} repeat(s)"
    )
    ratio_at = {}
    for length in lengths:
        m = measure(model, rows, length, depths, args.repeats)
        ratio_at[length] = m["ratio"]
        print(
            f"{length:>5} tokens: row by row {m['rows_cpu']:.2f} CPU s/cell "
            f"({m['rows_wall']:.2f} wall), one job {m['job_cpu']:.2f} CPU s/cell "
            f"({m['job_wall']:.2f} wall): ratio {m['ratio']:.3f} (1/{1 / m['ratio']:.2f})"
        )
    grid_hours(ratio_at)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
