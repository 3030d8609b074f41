"""Replay speed on the canonical trace (budget 256): numpy policies vs the card transcriptions.

Run: ``python benchmarks/replay.py [--repeats 7] [--json]``

For each policy it measures, in one run (the machine is shared and noisy, so the figures to quote
are the medians and the ratios, not absolute times):

* **policy µs/step** — ``on_decode_step`` + ``evict`` alone, fed the exact attention vectors the
  policy sees in a replay (recorded once beforehand);
* **transcription µs/step** — the same steps through the literal pure-Python transcription of
  the card's pseudocode (``h2o.reference``), fed the same vectors as Python lists;
* **replay µs/step** — the whole ``h2o.replay`` loop (gather, renormalise, step, evict, metrics),
  with and without recording per-step scores for heatmaps;
* **pure-Python replay µs/step** — the same replay written as plain Python over lists, driving the
  card transcription: the baseline for the replay ratio;
* and, for H2O, how the ratios grow with the budget (the transcription's cost is linear in the
  kept set; numpy's is dominated by a fixed per-call overhead up to a few hundred slots).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from h2o import canonical_trace, replay
from h2o.analysis import describe, make_policy
from h2o.reference import CARD_POLICIES

BUDGET = 256
LINEUP = [
    ("h2o", {"recent_window": 32}),
    ("h2o", {"recent_window": 64}),
    ("scissorhands", {"recent_window": 64}),
    ("tova", {"recent_window": 1}),
    ("streaming-llm", {"sinks": 4}),
    ("sliding-window", {}),
    ("random", {"recent_window": 32}),
]


def record_inputs(name, params, trace, budget):
    """The attention vectors the policy is shown at each step of a replay."""
    p = make_policy(name, budget, **params)
    inputs = []
    for t in range(trace.steps):
        w = trace.row(t)[p.kept]
        m = w.sum(dtype=np.float64)
        a = w / np.float32(m) if m > 0 else w
        inputs.append(a)
        p.on_decode_step(t, a)
        p.evict()
    return inputs


def time_policy(factory, inputs) -> float:
    p = factory()
    t0 = time.perf_counter()
    for t, a in enumerate(inputs):
        p.on_decode_step(t, a)
        p.evict()
    return (time.perf_counter() - t0) / len(inputs) * 1e6


def time_replay(name, params, trace, budget, record) -> float:
    p = make_policy(name, budget, **params)
    t0 = time.perf_counter()
    replay(p, trace, record=record)
    return (time.perf_counter() - t0) / trace.steps * 1e6


def numpy_floor(inputs, budget: int, window: int) -> float:
    """The bare numpy calls of one H2O step (validate, add, admit, argmin, shift), no policy
    object around them: the least a numpy-per-step design can cost."""
    mn, mx = np.minimum.reduce, np.maximum.reduce
    pos = np.zeros(budget + 2, np.int32)
    sc = np.zeros(budget + 2)
    n = 0
    t0 = time.perf_counter()
    for t, a in enumerate(inputs):
        if n:
            mn(a), mx(a)
            s = sc[:n]
            np.add(s, a, out=s)
        pos[n], sc[n] = t, 0.0
        n += 1
        if n > budget:
            i = int(sc[: n - window].argmin())
            pos[i : n - 1] = pos[i + 1 : n]
            sc[i : n - 1] = sc[i + 1 : n]
            n -= 1
    return (time.perf_counter() - t0) / len(inputs) * 1e6


def python_replay(card, rows, topk) -> tuple[float, list[float]]:
    """The replay loop as plain Python: restrict, renormalise, step, evict, measure."""
    held: set[int] = set()
    mass = []
    t0 = time.perf_counter()
    for t, row in enumerate(rows):
        w = [row[p] for p in card.kept]
        m = sum(w)
        if t:
            mass.append(m)
            top = topk[t]
            _recall = sum(1 for p in top if p in held) / len(top)
        card.on_decode_step(t, [x / m for x in w] if m > 0 else w)
        held.add(t)
        for v in card.evict():
            held.discard(v)
    return (time.perf_counter() - t0) / len(rows) * 1e6, mass


def median(f, repeats: int) -> float:
    return statistics.median(f() for _ in range(repeats))


def measure(name, params, trace, budget, repeats, rows_py, topk_py, full=True) -> dict:
    inputs = record_inputs(name, params, trace, budget)
    row = {
        "policy": describe(name, params),
        "budget": budget,
        "policy_us_per_step": median(
            lambda: time_policy(lambda: make_policy(name, budget, **params), inputs), repeats
        ),
        "replay_us_per_step": median(
            lambda: time_replay(name, params, trace, budget, False), repeats
        ),
    }
    if full:
        row["replay_recorded_us_per_step"] = median(
            lambda: time_replay(name, params, trace, budget, True), repeats
        )
    if name in CARD_POLICIES:
        card = CARD_POLICIES[name]
        lists = [a.tolist() for a in inputs]
        slow_repeats = max(3, repeats // 2)
        row["card_policy_us_per_step"] = median(
            lambda: time_policy(lambda: card(budget, **params), lists), slow_repeats
        )
        row["policy_speedup"] = row["card_policy_us_per_step"] / row["policy_us_per_step"]
        row["card_replay_us_per_step"] = median(
            lambda: python_replay(card(budget, **params), rows_py, topk_py)[0], slow_repeats
        )
        row["replay_speedup"] = row["card_replay_us_per_step"] / row["replay_us_per_step"]
    if name == "h2o":
        row["numpy_floor_us_per_step"] = median(
            lambda: numpy_floor(inputs, budget, params["recent_window"]), repeats
        )
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="runs per measurement (median)")
    ap.add_argument("--budgets", default="256,512,1024,2048", help="budgets of the H2O scaling")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args()

    t0 = time.perf_counter()
    trace = canonical_trace()
    gen = time.perf_counter() - t0
    trace.top_k(32)  # trace-level, shared by every replay (also by the pure-Python one)
    rows_py = [trace.row(t).tolist() for t in range(trace.steps)]
    topk_py = [[int(p) for p in r if p >= 0] for r in trace.top_k(32)]

    rows = []
    for name, params in LINEUP:
        print(f"measuring {describe(name, params)} ...", file=sys.stderr)
        rows.append(measure(name, params, trace, BUDGET, args.repeats, rows_py, topk_py))
    scaling = []
    for b in (int(x) for x in args.budgets.split(",")):
        print(f"measuring H2O at budget {b} ...", file=sys.stderr)
        scaling.append(
            measure("h2o", {"recent_window": 32}, trace, b, args.repeats, rows_py, topk_py, False)
        )

    if args.json:
        out = {"steps": trace.steps, "trace_build_s": gen, "rows": rows, "h2o_scaling": scaling}
        print(json.dumps(out, indent=2))
        return 0

    def cell(r, key, fmt):
        return format(r[key], fmt) if key in r else "—"

    print(
        f"canonical trace: {trace.steps} steps (built in {gen:.2f} s); budget {BUDGET}; "
        f"medians of {args.repeats} runs; µs per step"
    )
    cols = [
        ("policy", "policy_us_per_step", ".2f"),
        ("card", "card_policy_us_per_step", ".1f"),
        ("ratio", "policy_speedup", ".1f"),
        ("replay", "replay_us_per_step", ".2f"),
        ("py replay", "card_replay_us_per_step", ".1f"),
        ("ratio", "replay_speedup", ".1f"),
        ("+record", "replay_recorded_us_per_step", ".2f"),
    ]
    print(f"{'':34s}" + "".join(f"{h:>10s}" for h, _, _ in cols))
    for r in rows:
        print(f"{r['policy']:34s}" + "".join(f"{cell(r, k, f):>10s}" for _, k, f in cols))
    floor = rows[0].get("numpy_floor_us_per_step")
    if floor:
        print(f"\nbare numpy calls of one H2O step (no policy object): {floor:.2f} µs")
    print("\nH2O (recent_window=32) by budget, µs per step")
    print(f"{'budget':>8s}" + "".join(f"{h:>10s}" for h, _, _ in cols[:6]))
    for r in scaling:
        print(f"{r['budget']:8d}" + "".join(f"{cell(r, k, f):>10s}" for _, k, f in cols[:6]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
