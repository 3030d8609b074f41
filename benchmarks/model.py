"""Benchmark of the numpy SmolLM2-135M: load, capture, prefill, closed-loop quality evaluation.

    .venv/bin/python benchmarks/model.py [--sizes 512,1024,2048] [--quality-tokens 2048]
                                         [--policies ...] [--budget 256] [--repeats 3]
                                         [--grid-only] [--grid-tokens 1024] [--grid-rows ...]

* capture: one layer's attention trace (layer 8: only layers 0..8 run), time and peak memory;
* prefill: a full 30-layer causal prefill plus the perplexity head, time and peak memory;
* quality: ``perplexity_under_eviction`` per policy at T = 2048 (each layer's heads one
  lock-step bank), as a ratio to one plain (full-cache) run of the same function — the target
  is <= 1.15x for H2O — and the first policy once more stepped one instance at a time, as
  before banks (``lock_step=False``): the same perplexity, the old cost;
* allocations: the same evaluation of ``--allocation-policy`` under each of
  ``--allocations`` at equal total memory (target <= 2x the full-cache run), the duo
  calibration (one prefill that measures every head's attention split) and SnapKV's prefill
  with its window scores, each as a ratio to the plain full-cache run of the same repeat;
  ``--per-head`` adds adaptive and duo stepped one policy per head (``lock_step=False``, the
  path before their fast paths: an adaptive layer stepped whole, duo's mixed layers as banks).
* cells: one needle-grid cell, :func:`h2o.model.answer.score_answer`, per row of
  ``--cell-rows`` at ``--cell-tokens`` prompt tokens: the teacher-forced score alone
  (``max_new=0``: the prompt's prefill under the row and the answer as one more chunk) and the
  whole cell with ``--cell-max-new`` greedy tokens, each as a ratio to one plain full-cache
  evaluation (``perplexity_under_eviction(..., None)``) of prompt + answer, the same length
  (target for the teacher-forced cell: <= 1.2x); ``--cell-only`` runs this section alone.

* text rows: the closed loop of each row of ``--text-rows`` over ``--quality-tokens`` tokens
  (:func:`h2o.model.answer.row_perplexity`, what the memory frontier runs), as a ratio to the
  full cache's run of the same function in the same repeat: K-norm, KVzip and Expected
  Attention run their decode-time policy there, fed by the model; KVzip's scores (one repeat of
  the whole text, read first) are timed on their own too; ``--text-only`` runs this alone.
  "stepping" is the part of a row's run spent stepping its layers' policies (the calls of
  :meth:`h2o.model.fed_heads.FedHeads.step_rows`, summed; "-" for a row stepped otherwise): the
  policy's own cost, which the ratio mixes with the noise of the model's matrix products.

* depths: a needle-grid row's five depths at ``--grid-tokens`` with ``--grid-needles``
  needles a depth (3, as the grid runs), per row of ``--grid-rows``: the cells one by one (each
  prompt read from its start) and as the grid runs them (:func:`h2o.model.answer.score_cells`:
  the haystack they share read once), in full-cache forwards per five cells (time / needles /
  one full-cache evaluation of a cell's prompt and answer in the same repeat; target <= 3.5
  shared); the scores must agree (checked); ``--grid-only`` runs this alone.

Times are medians over ``--repeats`` runs, and each quality ratio is the median of the ratios
measured within one repeat (the machine is shared and noisy: a ratio taken inside one run
cancels most of the load of other processes). "peak" is the largest extra memory numpy
allocated during the call (tracemalloc, which numpy reports to), on top of the loaded model;
"RSS" is the process high-water mark.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from h2o.model import (  # noqa: E402
    SmolLM,
    capture_attention,
    perplexity_under_eviction,
    policy_factory,
)

TEXTS = [ROOT / "traces" / "texts" / "lighthouse.txt", ROOT / "traces" / "texts" / "library.txt"]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def _timed(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time over ``repeats`` runs; the median CPU seconds go to ``_CPU``."""
    walls, cpus = [], []
    for _ in range(repeats):
        c0, t = os.times(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t)
        c1 = os.times()
        cpus.append((c1.user - c0.user) + (c1.system - c0.system))
    _CPU[0] = statistics.median(cpus)
    return statistics.median(walls)


_CPU = [0.0]


def _peak_mb(fn: Callable[[], object]) -> float:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="512,1024,2048,4096")
    ap.add_argument("--layer", type=int, default=8)
    ap.add_argument("--quality-tokens", type=int, default=2048)
    ap.add_argument(
        "--policies", default="h2o,streaming-llm,tova,scissorhands,sliding-window,random"
    )
    ap.add_argument("--budget", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--no-per-instance", action="store_true", help="skip the first policy's unbanked run"
    )
    ap.add_argument("--allocations", default="uniform,pyramid,adaptive,duo")
    ap.add_argument("--allocation-policy", default="h2o")
    ap.add_argument("--skip-policies", action="store_true", help="only the allocations")
    ap.add_argument(
        "--per-head",
        action="store_true",
        help="also run adaptive and duo one policy per head (lock_step=False: the path before "
        "their fast paths; the same perplexity)",
    )
    ap.add_argument("--cell-tokens", type=int, default=2048)
    ap.add_argument(
        "--cell-rows",
        default="full,h2o@256,tova@256,snapkv@256,knorm@256,kivi4,kivi2+sinks,h2o@256+kivi4",
    )
    ap.add_argument("--cell-max-new", type=int, default=8)
    ap.add_argument("--cell-only", action="store_true", help="only the per-cell cost")
    ap.add_argument("--text-rows", default="h2o@256,knorm@256,kvzip@256,expected-attention@256")
    ap.add_argument("--text-only", action="store_true", help="only the rows over a text")
    ap.add_argument("--grid-tokens", type=int, default=1024)
    ap.add_argument(
        "--grid-rows",
        default="full,h2o@256:w50%,h2o@256:w50%:prefill,snapkv@256,kivi4,h2o@256:w50%+kivi4",
    )
    ap.add_argument("--grid-needles", type=int, default=3, help="needles a depth, as the grid")
    ap.add_argument("--grid-only", action="store_true", help="only the cost of a row's depths")
    args = ap.parse_args()

    t = time.perf_counter()
    model = SmolLM.load()
    load_s = time.perf_counter() - t
    print(f"model load: {load_s:.2f} s, RSS after load {_rss_mb():.0f} MB", flush=True)
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    ids_all = [i for p in TEXTS for i in model.encode(p.read_text("utf-8"))]
    if args.text_rows:
        _text_rows(model, ids_all, args)
    if args.text_only:
        return 0
    if args.grid_rows and not args.cell_only:  # --cell-only: the cells alone
        _depths(model, args)
    if args.grid_only:
        return 0
    if args.cell_rows:
        _cells(model, ids_all, args)
    if args.cell_only:
        return 0

    print(
        f"\n{'T':>6} | {'capture L' + str(args.layer):>14} {'cpu':>7} {'peak':>7} "
        f"| {'prefill+ppl':>14} {'cpu':>7} {'peak':>7}"
    )
    for T in (int(s) for s in args.sizes.split(",") if s):
        if len(ids_all) < T:
            print(f"{T:>6} | (only {len(ids_all)} tokens of text)")
            continue
        ids = ids_all[:T]

        # the attention rows and vectors of one layer; KVzip's two passes (kvzip=True, what the
        # CLI's capture adds) are the second pass a needle cell's cost states separately
        def cap(ids=ids):
            return capture_attention(model, ids, args.layer, kvzip=False)

        cap_s = _timed(cap, args.repeats)
        cap_cpu = _CPU[0]
        cap_mb = _peak_mb(cap)
        pre_s = _timed(lambda ids=ids: model.perplexity(ids), args.repeats)
        pre_cpu = _CPU[0]
        pre_mb = _peak_mb(lambda ids=ids: model.perplexity(ids))
        print(
            f"{T:>6} | {cap_s:>12.2f} s {cap_cpu:>5.1f} s {cap_mb:>4.0f} MB "
            f"| {pre_s:>12.2f} s {pre_cpu:>5.1f} s {pre_mb:>4.0f} MB",
            flush=True,
        )

    T = args.quality_tokens
    ids = ids_all[:T]
    if args.allocations:
        _allocations(model, ids, args)
    if args.skip_policies:
        return 0
    # Interleaved: every repeat runs the full-cache baseline and each policy once, so that a
    # burst of load from other processes hits all of them alike; a ratio is taken within a repeat.
    # Every policy runs as one lock-step bank per layer; the first one also runs the way it did
    # before banks (one instance per layer and KV head, stepped one by one) for comparison.
    names = args.policies.split(",")
    runs: dict[str, tuple[object, bool]] = {"full cache": (None, True)}
    runs |= {name: (policy_factory(name, args.budget), True) for name in names}
    if names and not args.no_per_instance:
        runs[f"{names[0]} per instance"] = (policy_factory(names[0], args.budget), False)
    wall: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    ppl: dict[str, float] = {}
    for _ in range(args.repeats):
        for label, (f, lock_step) in runs.items():
            w = _timed(
                lambda f=f, label=label, lock_step=lock_step: ppl.__setitem__(
                    label,
                    perplexity_under_eviction(model, ids, f, lock_step=lock_step).perplexity,
                ),
                1,
            )
            wall[label].append(w)
            cpu[label].append(_CPU[0])
    print(
        f"\nquality evaluation at T = {T}, budget {args.budget} per head; ratio = time / the "
        f"plain full-cache run of the same repeat (medians of {args.repeats})"
    )
    print(f"{'policy':<20} {'wall':>8} {'ratio':>6} {'cpu':>8} {'ratio':>6} {'perplexity':>11}")
    base_w, base_c = wall["full cache"], cpu["full cache"]
    med = statistics.median
    for label in runs:
        r_w = med(a / b for a, b in zip(wall[label], base_w, strict=True))
        r_c = med(a / b for a, b in zip(cpu[label], base_c, strict=True))
        print(
            f"{label:<20} {med(wall[label]):>6.2f} s {r_w:>6.2f} "
            f"{med(cpu[label]):>6.1f} s {r_c:>6.2f} {ppl[label]:>11.2f}"
        )
    print(f"\nprocess RSS high-water mark: {_rss_mb():.0f} MB")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


def _allocations(model: SmolLM, ids: list[int], args: argparse.Namespace) -> None:
    """Each allocation's closed-loop evaluation, the duo calibration and SnapKV's prefill, as
    ratios to the plain full-cache evaluation of the same repeat (interleaved, like the rest)."""
    from h2o.model.allocation import allocated_factory, head_shares, make_allocation
    from h2o.model.kv_cache import KVCache
    from h2o.model.snapkv import snapkv_window_attention

    shares = head_shares(model, ids[:1024]).kv_rest()  # calibration for duo (not timed here)
    runs: dict[str, Callable[[], object]] = {
        "full cache": lambda: perplexity_under_eviction(model, ids, None),
    }
    for name in args.allocations.split(","):
        alloc = make_allocation(model, name, args.budget, shares)
        f, _ = allocated_factory(args.allocation_policy, alloc)
        runs[f"{args.allocation_policy}/{name}"] = lambda f=f: perplexity_under_eviction(
            model, ids, f
        )
        if args.per_head and name in ("adaptive", "duo"):
            runs[f"{args.allocation_policy}/{name} per head"] = lambda f=f: (
                perplexity_under_eviction(model, ids, f, lock_step=False)
            )
    runs["duo calibration"] = lambda: head_shares(model, ids)
    runs["snapkv prefill"] = lambda: snapkv_window_attention(
        model, ids, KVCache(model.config, len(ids)), 32
    )
    wall: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeats):
        for label, fn in runs.items():
            wall[label].append(_timed(fn, 1))
    med = statistics.median
    base = wall["full cache"]
    print(
        f"\nallocations at T = {len(ids)}, budget {args.budget} per head on average; ratio = "
        f"time / the plain full-cache run of the same repeat (medians of {args.repeats}; "
        "target <= 2x)"
    )
    print(f"{'run':<22} {'wall':>8} {'ratio':>6}")
    for label in runs:
        r = med(a / b for a, b in zip(wall[label], base, strict=True))
        print(f"{label:<22} {med(wall[label]):>6.2f} s {r:>6.2f}", flush=True)


def _text_rows(model: SmolLM, ids_all: list[int], args: argparse.Namespace) -> None:
    """Each row's closed loop over a text (the frontier's cell), as a ratio to the full cache's
    in the same repeat; KVzip's repeat pass also alone."""
    from h2o.model import fed_heads
    from h2o.model.answer import row_perplexity
    from h2o.model.caches import KvzipCache
    from h2o.model.rows import Row, parse_rows

    # the time inside the layers' stepping, summed over a run (a wrapper: the benchmark's only)
    stepped = [0.0]
    step_rows = fed_heads.FedHeads.step_rows

    def timed_step_rows(self, *args, **kwargs):
        t = time.perf_counter()
        try:
            return step_rows(self, *args, **kwargs)
        finally:
            stepped[0] += time.perf_counter() - t

    fed_heads.FedHeads.step_rows = timed_step_rows  # type: ignore[method-assign]

    T = args.quality_tokens
    ids = ids_all[:T]
    runs: dict[str, Callable[[], object]] = {
        "full": lambda: row_perplexity(model, ids, Row.parse("full"))
    }
    for row in parse_rows(args.text_rows):
        runs[row.label] = lambda row=row: row_perplexity(model, ids, row)
        if isinstance(row.cache, KvzipCache) and "KVzip's repeat pass" not in runs:
            runs["KVzip's repeat pass"] = lambda row=row: row.cache.scores_ahead(model, ids[:-1])
    wall: dict[str, list[float]] = {k: [] for k in runs}
    stepping: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeats):
        for label, fn in runs.items():
            stepped[0] = 0.0
            wall[label].append(_timed(fn, 1))
            stepping[label].append(stepped[0])
    fed_heads.FedHeads.step_rows = step_rows  # type: ignore[method-assign]
    med = statistics.median
    print(
        f"\nrows over a text of {T} tokens (the frontier's cell); ratio = time / the full "
        f"cache's in the same repeat (medians of {args.repeats}); load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(f"{'row':<28} {'time':>9} {'ratio':>7} {'stepping':>9}")
    for label in runs:
        r = med(a / b for a, b in zip(wall[label], wall["full"], strict=True))
        s = med(stepping[label])
        step = f"{s:>7.2f} s" if s else f"{'-':>9}"
        print(f"{label:<28} {med(wall[label]):>7.2f} s {r:>6.2f}x {step}", flush=True)


def _cells(model: SmolLM, ids_all: list[int], args: argparse.Namespace) -> None:
    """Per-cell cost of the needle grid: each row's teacher-forced score and whole cell, as a
    ratio to the plain full-cache evaluation of the same tokens in the same repeat."""
    from h2o.model.answer import score_answer
    from h2o.model.rows import parse_rows

    rows = parse_rows(args.cell_rows)
    T = args.cell_tokens
    prompt, answer = ids_all[:T], ids_all[T : T + 4]  # a 4-token answer
    same = prompt + answer
    runs: dict[str, Callable[[], object]] = {
        "full-cache forward": lambda: perplexity_under_eviction(model, same, None)
    }
    for row in rows:
        runs[f"{row.label} teacher-forced"] = lambda row=row: score_answer(
            model, prompt, answer, row, max_new=0
        )
        runs[f"{row.label} + {args.cell_max_new} greedy"] = lambda row=row: score_answer(
            model, prompt, answer, row, max_new=args.cell_max_new, stop_at_eos=False
        )
    wall: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeats):
        for label, fn in runs.items():
            wall[label].append(_timed(fn, 1))
            cpu[label].append(_CPU[0])
    med = statistics.median
    base, base_c = wall["full-cache forward"], cpu["full-cache forward"]
    print(
        f"\nneedle-grid cells at {T} prompt tokens + a {len(answer)}-token answer; ratio = "
        f"time / one plain full-cache evaluation of the {len(same)} tokens in the same repeat "
        f"(medians of {args.repeats}; target <= 1.2x teacher-forced); load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(f"{'run':<34} {'wall':>8} {'ratio':>6} {'cpu':>8} {'ratio':>6}")
    for label in runs:
        r = med(a / b for a, b in zip(wall[label], base, strict=True))
        rc = med(a / b for a, b in zip(cpu[label], base_c, strict=True))
        print(
            f"{label:<34} {med(wall[label]):>6.2f} s {r:>6.2f} "
            f"{med(cpu[label]):>6.1f} s {rc:>6.2f}",
            flush=True,
        )


def _depths(model: SmolLM, args: argparse.Namespace) -> None:
    """A row's five depths of the needle grid at ``--grid-tokens``: the cells one by one (each
    prompt read from its start) and as the grid runs them (what they share read once), in
    full-cache forwards: time / one plain full-cache evaluation of a cell's prompt and answer
    in the same repeat. The two ways must give the same scores; checked here too."""
    from h2o.model.answer import score_answer, score_cells
    from h2o.model.rows import parse_rows
    from h2o.needle.cells import cell_needles
    from h2o.needle.haystack import DEPTHS, build_prompt
    from h2o.needle.needles import needle

    T, per = args.grid_tokens, args.grid_needles
    built = [
        build_prompt(model.encode, needle(nd), T, d)
        for d in DEPTHS
        for nd in cell_needles(T, d, per)
    ]
    cells = [(p.ids, p.answer_ids, p.needle_span) for p in built]
    middle = built[len(built) // 2]  # depth 50 %
    whole = middle.ids + middle.answer_ids
    base: list[float] = []
    forward: list[float] = []  # one full-cache forward of a prompt: the prefill alone
    alone: dict[str, list[float]] = {}
    shared: dict[str, list[float]] = {}
    rows = parse_rows(args.grid_rows)
    for _ in range(args.repeats):
        base.append(_timed(lambda: perplexity_under_eviction(model, whole, None), 1))
        forward.append(_timed(lambda: model.forward(middle.ids), 1))
        for row in rows:
            got: list = []
            alone.setdefault(row.label, []).append(
                _timed(
                    lambda row=row, got=got: got.extend(
                        score_answer(model, i, a, row, needle_span=s) for i, a, s in cells
                    ),
                    1,
                )
            )
            both: list = []
            shared.setdefault(row.label, []).append(
                _timed(lambda row=row, both=both: both.extend(score_cells(model, cells, row)), 1)
            )
            for x, y in zip(got, both, strict=True):
                if (x.token_logprobs, x.produced_ids, x.held) != (
                    y.token_logprobs, y.produced_ids, y.held
                ):  # fmt: skip
                    raise SystemExit(f"{row.label}: the shared cells scored differently")
    med = statistics.median
    print(
        f"\na row's {len(DEPTHS)} depths at {T} tokens ({per} needle(s) a depth: {len(cells)} "
        f"cells), per {len(DEPTHS)} cells, in full-cache forwards: time / {per} / one full-cache "
        f"evaluation of a cell's {len(whole)} tokens in the same repeat (medians of "
        f"{args.repeats}; target <= 3.5 shared); load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"(and in prefills: / one full-cache forward of a cell's {len(middle.ids)} prompt tokens, "
        f"no output layer; median {med(forward):.2f} s against {med(base):.2f} s)"
    )
    print(
        f"{'row':<26} {'one by one':>11} {'shared':>7} {'ratio':>6} | {'in prefills':>11} "
        f"{'shared':>7} | {'wall shared':>11}"
    )

    def per_five(times: list[float], unit: list[float]) -> float:
        return med(x / u / per for x, u in zip(times, unit, strict=True))

    for row in rows:
        a, sh = per_five(alone[row.label], base), per_five(shared[row.label], base)
        fa, fs = per_five(alone[row.label], forward), per_five(shared[row.label], forward)
        r = med(x / y for x, y in zip(shared[row.label], alone[row.label], strict=True))
        wall = med(shared[row.label])
        print(
            f"{row.label:<26} {a:>11.2f} {sh:>7.2f} {r:>6.2f} | {fa:>11.2f} {fs:>7.2f} | "
            f"{wall:>9.1f} s",
            flush=True,
        )


if __name__ == "__main__":
    raise SystemExit(main())
