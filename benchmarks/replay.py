"""Replay speed on the canonical trace (budget 256): numpy policies vs the card transcriptions.

Run: ``python benchmarks/replay.py [--repeats 7] [--json] [--only banks] [--model]
[--markdown PATH]`` — the last lines are the banks' targets table (before, measured, target,
met), which ``--markdown`` also writes as Markdown, with the command; ``--model`` adds the
closed-loop row (it loads SmolLM2-135M: a minute or two more).

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

Banks (:mod:`h2o.bank`, the lock-step engine behind sweeps, budget curves and the model), each a
median over repeats of the ratio measured *within* one repeat (interleaved, so a burst of load
from other processes hits both sides alike):

* **sweep** — ``analysis.sweep_windows`` of H2O over 25 windows (0, 8, …, 192) against one
  ``replay`` (record=False) of H2O, and the same 25 windows as 25 replays (as before banks);
  target <= 2x;
* **bank step** — ``on_decode_step`` + ``evict`` (input checks included) of a bank of 25 H2O
  lanes over 1024 steady-state steps, fed the exact blocks a lock-step replay shows it, per
  instance, against the same steps through 25 numpy instances and 25 card transcriptions;
  target <= 0.5 µs an instance, >= 25x the transcription;
* **bank of 1** — the same for one lane (H2O, recent_window=64) against its instance, and
  ``replay_bank`` of one lane against ``replay``: it must be no slower;
* **explorer** — the analysis calls of a cold recentWindow explorer page (the canonical trace
  built anew, then H2O and Scissorhands over the page's 25 windows and the two reference
  replays) and, if streamlit is importable, the page itself run cold in ``streamlit.testing``;
  target <= 0.8 s.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from h2o import H2O, Scissorhands, analysis, canonical_trace, make_bank, replay, replay_bank
from h2o.analysis import describe, make_policy
from h2o.reference import CARD_POLICIES, CardH2O
from h2o.replay import replay_stepwise

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


def time_replay(name, params, trace, budget, record, run=replay) -> float:
    p = make_policy(name, budget, **params)
    t0 = time.perf_counter()
    run(p, trace, record=record)
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
        # The Python loop, one step at a time: what replay() ran before its compiled path.
        row["stepwise_us_per_step"] = median(
            lambda: time_replay(name, params, trace, budget, False, replay_stepwise),
            max(3, repeats // 2),
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
        if full:
            row["recorded_speedup"] = (
                row["card_replay_us_per_step"] / row["replay_recorded_us_per_step"]
            )
    if name == "h2o":
        row["numpy_floor_us_per_step"] = median(
            lambda: numpy_floor(inputs, budget, params["recent_window"]), repeats
        )
    return row


# -- banks -------------------------------------------------------------------------------------
SWEEP = range(0, 193, 8)  # 25 windows
STEADY = (512, 1536)  # the steps a bank step is timed on (every lane long past its budget)


#: CPU seconds of the last :func:`interleaved` call, by key (this process only: less sensitive
#: to other processes on a shared machine than wall time, which the targets are stated in).
CPU: dict[str, list[float]] = {}


def interleaved(fs: dict[str, object], repeats: int) -> dict[str, list[float]]:
    """Wall seconds of each callable, run in turn ``repeats`` times (CPU seconds in ``CPU``).
    A callable that times a section of its own (past a warm-up) returns ``(wall, cpu)`` of it,
    and that is what counts."""
    out: dict[str, list[float]] = {k: [] for k in fs}
    CPU.clear()
    CPU.update({k: [] for k in fs})
    for _ in range(repeats):
        for k, f in fs.items():
            c0, t0 = time.process_time(), time.perf_counter()
            own = f()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            if isinstance(own, tuple):
                wall, cpu = own
            out[k].append(wall)
            CPU[k].append(cpu)
    return out


def ratio(a: list[float], b: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def bank_blocks(trace, windows, budget: int, stop: int) -> list[np.ndarray]:
    """The ``(N, n)`` block a bank of H2O lanes is shown at each step ``< stop`` of a replay."""
    bank = make_bank([H2O(budget, w) for w in windows])
    blocks = []
    for t in range(stop):
        row = trace.row(t)
        w = np.stack([row[bank.kept(i)] for i in range(len(bank))])
        m = w.sum(axis=1, dtype=np.float64)
        a = w / np.where(m > 0, m, 1).astype(np.float32)[:, None]
        blocks.append(a)
        bank.on_decode_step(t, a)
        bank.evict()
    return blocks


def time_bank_steps(make, blocks, start: int) -> tuple[float, float]:
    """Wall and CPU seconds of ``on_decode_step`` + ``evict`` over ``blocks[start:]``, after a
    warm-up (the steps before ``start``, not counted)."""
    bank = make()
    for t in range(start):
        bank.on_decode_step(t, blocks[t])
        bank.evict()
    c0, t0 = time.process_time(), time.perf_counter()
    for t in range(start, len(blocks)):
        bank.on_decode_step(t, blocks[t])
        bank.evict()
    return time.perf_counter() - t0, time.process_time() - c0


def time_lanes(make, rows, start: int) -> tuple[float, float]:
    """The same steps through one separate object per lane (numpy instances or transcriptions);
    ``rows[t][i]`` is lane ``i``'s vector."""
    lanes = [make(i) for i in range(len(rows[0]))]
    for t in range(start):
        for p, a in zip(lanes, rows[t], strict=True):
            p.on_decode_step(t, a)
            p.evict()
    c0, t0 = time.process_time(), time.perf_counter()
    for t in range(start, len(rows)):
        for p, a in zip(lanes, rows[t], strict=True):
            p.on_decode_step(t, a)
            p.evict()
    return time.perf_counter() - t0, time.process_time() - c0


def measure_banks(trace, repeats: int) -> dict:
    budget, (start, stop) = BUDGET, STEADY
    steps = stop - start
    out: dict = {"lanes": len(SWEEP), "steady_steps": [start, stop]}

    print("measuring the H2O window sweep against one replay ...", file=sys.stderr)
    runs = interleaved(
        {
            "replay": lambda: replay(H2O(budget, 64), trace, record=False),
            "sweep": lambda: analysis.sweep_windows(trace, "h2o", SWEEP, budget),
        },
        repeats,
    )
    out["one_replay_s"] = statistics.median(runs["replay"])
    out["sweep_s"] = statistics.median(runs["sweep"])
    out["sweep_over_replay"] = ratio(runs["sweep"], runs["replay"])
    out["sweep_over_replay_cpu"] = ratio(CPU["sweep"], CPU["replay"])
    runs = interleaved(  # the explorer's other sweep
        {
            "replay": lambda: replay(Scissorhands(budget, 64), trace, record=False),
            "sweep": lambda: analysis.sweep_windows(trace, "scissorhands", SWEEP, budget),
        },
        repeats,
    )
    out["sh_sweep_over_replay"] = ratio(runs["sweep"], runs["replay"])
    out["sh_sweep_over_replay_cpu"] = ratio(CPU["sweep"], CPU["replay"])
    runs = interleaved(  # the same sweep as it ran before banks: one replay per window
        {
            "replay": lambda: replay(H2O(budget, 64), trace, record=False),
            "replays": lambda: [replay(H2O(budget, w), trace, record=False) for w in SWEEP],
        },
        max(3, repeats // 3),
    )
    out["sweep_replays_over_replay"] = ratio(runs["replays"], runs["replay"])

    print("measuring a bank step against separate instances ...", file=sys.stderr)
    blocks = bank_blocks(trace, SWEEP, budget, stop)
    lists = [[r.tolist() for r in b] for b in blocks]
    gc.freeze()  # (see main: millions of Python floats for the transcriptions)
    runs = interleaved(
        {
            "bank": lambda: time_bank_steps(
                lambda: make_bank([H2O(budget, w) for w in SWEEP]), blocks, start
            ),
            "numpy": lambda: time_lanes(lambda i: H2O(budget, SWEEP[i]), blocks, start),
            "card": lambda: time_lanes(lambda i: CardH2O(budget, SWEEP[i]), lists, start),
        },
        max(3, repeats // 2),
    )
    per = {k: [x / steps / len(SWEEP) * 1e6 for x in v] for k, v in runs.items()}
    out["bank_us_per_instance_step"] = statistics.median(per["bank"])
    out["numpy_us_per_instance_step"] = statistics.median(per["numpy"])
    out["card_us_per_instance_step"] = statistics.median(per["card"])
    out["bank_vs_numpy"] = ratio(per["numpy"], per["bank"])
    out["bank_vs_card"] = ratio(per["card"], per["bank"])
    out["bank_us_per_instance_step_cpu"] = statistics.median(
        x / steps / len(SWEEP) * 1e6 for x in CPU["bank"]
    )
    out["bank_vs_card_cpu"] = ratio(CPU["card"], CPU["bank"])

    print("measuring a bank of one lane against its instance ...", file=sys.stderr)
    lane = list(SWEEP).index(64)
    one = [b[lane : lane + 1] for b in blocks]
    runs = interleaved(
        {
            "instance": lambda: time_lanes(lambda i: H2O(budget, 64), one, start),
            "bank": lambda: time_bank_steps(lambda: make_bank([H2O(budget, 64)]), one, start),
            "replay": lambda: replay(H2O(budget, 64), trace, record=False),
            "replay_bank": lambda: replay_bank(make_bank([H2O(budget, 64)]), trace),
        },
        repeats,
    )
    out["bank1_step_us"] = statistics.median(runs["bank"]) / steps * 1e6
    out["instance_step_us"] = statistics.median(runs["instance"]) / steps * 1e6
    out["bank1_over_instance_step"] = ratio(runs["bank"], runs["instance"])
    out["bank1_over_instance_replay"] = ratio(runs["replay_bank"], runs["replay"])
    return out


def measure_explorer(repeats: int) -> dict:
    """What a cold recentWindow explorer page computes, at the default budget 256 (the app's
    ``app.sweeps.window_sweep``: H2O and Scissorhands at its windows, two reference replays)."""
    band = 64
    windows = sorted({*range(0, 3 * BUDGET // 4 + 1, BUDGET // 32), 32, band})
    refs = [("streaming-llm", {"sinks": 4}), ("sliding-window", {})]

    def analysis_calls() -> tuple[float, float, float]:
        c0, t0 = time.process_time(), time.perf_counter()
        trace = canonical_trace()
        t1 = time.perf_counter()
        for name in ("h2o", "scissorhands"):
            analysis.sweep_windows(trace, name, windows, BUDGET, 32)
        analysis.bench(trace, BUDGET, 32, lineup=refs)
        return t1 - t0, time.perf_counter() - t0, time.process_time() - c0

    print("measuring the explorer's analysis, cold ...", file=sys.stderr)
    runs = [analysis_calls() for _ in range(repeats)]
    out = {
        "windows": len(windows),
        "trace_build_s": statistics.median(r[0] for r in runs),
        "analysis_s": statistics.median(r[1] for r in runs),
        "analysis_cpu_s": statistics.median(r[2] for r in runs),
    }
    try:
        import streamlit as st
        from streamlit.testing.v1 import AppTest
    except ImportError:
        return out
    print("measuring the explorer page in streamlit.testing, cold ...", file=sys.stderr)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main = str(Path(__file__).resolve().parents[1] / "app" / "main.py")
    walls = []
    for _ in range(repeats):
        at = AppTest.from_file(main, default_timeout=300)
        at.run()  # the default page, then the explorer with every cache emptied
        st.cache_data.clear()
        st.cache_resource.clear()
        at.switch_page("views/window_explorer.py")
        t0 = time.perf_counter()
        at.run()
        walls.append(time.perf_counter() - t0)
        if at.exception:
            raise SystemExit(f"the app raised: {[e.value for e in at.exception]}")
    out["page_s"] = statistics.median(walls)
    return out


def measure_model(repeats: int, budget: int = 256, tokens: int = 2048) -> dict:
    """The closed loop: ``perplexity_under_eviction`` with H2O (each layer's heads one bank)
    against the full cache, interleaved, at T = ``tokens`` — as ``benchmarks/model.py`` times it
    — twice: numpy's BLAS on one thread (the app's server on this machine: ``app/jobs.py`` caps
    it at one core fewer than there are) and on every core (the command line). The policy steps
    run on one core either way, so they weigh more against a prefill that uses more."""
    from threadpoolctl import threadpool_limits

    from h2o.model import SmolLM, perplexity_under_eviction, policy_factory

    print("loading the model for the closed loop ...", file=sys.stderr)
    model = SmolLM.load()
    texts = Path(__file__).resolve().parents[1] / "traces" / "texts"
    ids = [
        i
        for f in ("lighthouse.txt", "library.txt")
        for i in model.encode((texts / f).read_text("utf-8"))
    ]
    ids = ids[:tokens]
    h2o = policy_factory("h2o", budget)
    cores = os.cpu_count() or 1
    out: dict = {"tokens": len(ids), "cores": cores}
    for threads, key in ((max(1, cores - 1), "server"), (cores, "cli")):
        print(
            f"measuring closed-loop H2O at T = {len(ids)}, {threads} BLAS thread(s) ...",
            file=sys.stderr,
        )
        with threadpool_limits(limits=threads, user_api="blas"):
            runs = interleaved(
                {
                    "full": lambda: perplexity_under_eviction(model, ids, None),
                    "h2o": lambda: perplexity_under_eviction(model, ids, h2o),
                },
                repeats,
            )
        out[key] = {
            "blas_threads": threads,
            "full_s": statistics.median(runs["full"]),
            "h2o_s": statistics.median(runs["h2o"]),
            "h2o_over_full": ratio(runs["h2o"], runs["full"]),
            "h2o_over_full_cpu": ratio(CPU["h2o"], CPU["full"]),
        }
    return out


#: The banks' targets and the figures before them (first as measured when the targets were set,
#: then on the last numpy-only banks before the compiled loops, by this script on a quiet machine).
TARGETS = [
    ("H2O sweep, 25 windows, canonical trace, budget 256 / one replay", "19x; 3.36x", "<= 2x"),
    ("Scissorhands sweep, same windows / one replay (the explorer's other half)", "3.13x", "—"),
    (
        "bank step, per instance in a bank of 25 (× the card transcription)",
        "1.05 µs, 16.3x",
        "<= 0.5 µs, >= 25x",
    ),
    ("cold recentWindow explorer, analysis calls (server time)", "2.6 s; 0.54 s", "<= 0.8 s"),
    ("closed-loop H2O perplexity at T = 2048 / one full-cache run", "1.55x; 1.21x", "<= 1.15x"),
]


def target_rows(b: dict, e: dict | None, m: dict | None) -> list[tuple[str, str, str, str, str]]:
    """``(what, before, measured, target, met)`` rows for the targets table."""
    rows = []
    sweep = b["sweep_over_replay"]
    rows.append(
        (
            *TARGETS[0][:2],
            f"{sweep:.2f}x (cpu {b['sweep_over_replay_cpu']:.2f}x; "
            f"{b['sweep_s'] * 1e3:.0f} ms vs {b['one_replay_s'] * 1e3:.0f} ms)",
            TARGETS[0][2],
            "yes" if sweep <= 2 else "no",
        )
    )
    rows.append(
        (
            *TARGETS[1][:2],
            f"{b['sh_sweep_over_replay']:.2f}x (cpu {b['sh_sweep_over_replay_cpu']:.2f}x)",
            TARGETS[1][2],
            "",
        )
    )
    us = b["bank_us_per_instance_step"]
    rows.append(
        (
            *TARGETS[2][:2],
            f"{us:.2f} µs, {b['bank_vs_card']:.1f}x the card (cpu "
            f"{b['bank_us_per_instance_step_cpu']:.2f} µs, {b['bank_vs_card_cpu']:.1f}x)",
            TARGETS[2][2],
            "yes" if us <= 0.5 and b["bank_vs_card"] >= 25 else "no",
        )
    )
    if e:
        page = f"; page in streamlit.testing {e['page_s']:.2f} s" if "page_s" in e else ""
        rows.append(
            (
                *TARGETS[3][:2],
                f"{e['analysis_s']:.2f} s (cpu {e['analysis_cpu_s']:.2f} s; trace build "
                f"{e['trace_build_s']:.2f} s){page}",
                TARGETS[3][2],
                "yes" if e["analysis_s"] <= 0.8 else "no",
            )
        )
    if m:
        cells = [
            f"{r['h2o_over_full']:.2f}x with {r['blas_threads']} BLAS thread(s) ({name}; "
            f"{r['h2o_s']:.2f} s vs {r['full_s']:.2f} s)"
            for name, r in (("as the app's server", m["server"]), ("all cores", m["cli"]))
        ]
        met = [m[k]["h2o_over_full"] <= 1.15 for k in ("server", "cli")]
        rows.append(
            (
                *TARGETS[4][:2],
                "; ".join(cells),
                TARGETS[4][2],
                "yes" if all(met) else ("with 1 thread" if met[0] else "no"),
            )
        )
    else:
        rows.append((*TARGETS[4][:2], "not run (--model)", TARGETS[4][2], ""))
    return rows


def print_targets(rows, header: str) -> None:
    print(f"\nspeed targets — {header}")
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    heads = ("what", "before", "measured (medians, ratios within one run)", "target", "met")
    widths = [max(w, len(h)) for w, h in zip(widths, heads, strict=True)]
    for r in (heads, *rows):
        print("  " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))


def write_markdown(path: str, rows, header: str, command: str) -> None:
    lines = [
        f"Measured with `{command}` ({header}):",
        "",
        "| what | before | measured | target | met |",
        "|---|---|---|---|---|",
        *(f"| {' | '.join(r)} |" for r in rows),
        "",
    ]
    Path(path).write_text("\n".join(lines), encoding="utf-8")
    print(f"\nwrote {path}", file=sys.stderr)


def print_banks(b: dict, e: dict | None) -> None:
    print(f"\nbanks: {b['lanes']} H2O lanes (recent_window 0, 8, …, 192), budget {BUDGET}")
    print(
        f"  window sweep {b['sweep_s'] * 1e3:.0f} ms, one replay {b['one_replay_s'] * 1e3:.0f} ms:"
        f" sweep / replay = {b['sweep_over_replay']:.2f} (target <= 2; one replay per window:"
        f" {b['sweep_replays_over_replay']:.1f})"
    )
    print(
        f"  step per instance, steps {b['steady_steps'][0]}..{b['steady_steps'][1] - 1}: "
        f"bank {b['bank_us_per_instance_step']:.2f} µs, numpy instance "
        f"{b['numpy_us_per_instance_step']:.2f} µs, card {b['card_us_per_instance_step']:.1f} µs"
        f" — {b['bank_vs_numpy']:.1f}x the instances, {b['bank_vs_card']:.1f}x the card "
        "(targets <= 0.5 µs, >= 25x)"
    )
    print(
        f"  bank of 1: step {b['bank1_step_us']:.2f} µs vs instance {b['instance_step_us']:.2f}"
        f" µs (ratio {b['bank1_over_instance_step']:.2f}); replay_bank / replay = "
        f"{b['bank1_over_instance_replay']:.2f} (target <= 1)"
    )
    if e:
        print(
            f"  cold explorer ({e['windows']} windows): analysis calls {e['analysis_s']:.2f} s "
            f"(of which building the trace {e['trace_build_s']:.2f} s)"
            + (f"; page in streamlit.testing {e['page_s']:.2f} s" if "page_s" in e else "")
            + " (target <= 0.8 s)"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="runs per measurement (median)")
    ap.add_argument("--budgets", default="256,512,1024,2048", help="budgets of the H2O scaling")
    ap.add_argument("--json", action="store_true", help="print JSON")
    ap.add_argument(
        "--only", choices=["policies", "banks"], help="just the per-policy tables, or the banks"
    )
    ap.add_argument(
        "--model", action="store_true", help="also time the closed loop (loads SmolLM2, slow)"
    )
    ap.add_argument("--markdown", metavar="PATH", help="write the targets table as Markdown")
    args = ap.parse_args()
    command = "python benchmarks/replay.py " + " ".join(sys.argv[1:])

    t0 = time.perf_counter()
    trace = canonical_trace()
    gen = time.perf_counter() - t0
    trace.top_k(32)  # trace-level, shared by every replay (also by the pure-Python one)
    rows_py = [trace.row(t).tolist() for t in range(trace.steps)]
    topk_py = [[int(p) for p in r if p >= 0] for r in trace.top_k(32)]
    # The pure-Python baselines' inputs are millions of Python objects: out of the collector's
    # sight, or every full collection during a timed loop walks them (a cost of this script,
    # not of the code it times).
    gc.freeze()

    banks = explorer = model = None
    header = ""
    if args.only != "policies":
        load = os.getloadavg()[0]
        banks = measure_banks(trace, args.repeats)
        explorer = measure_explorer(max(3, args.repeats // 2))
        if args.model:
            model = measure_model(max(3, args.repeats // 3))
        header = (
            f"{args.repeats} repeats, load average {load:.1f} → {os.getloadavg()[0]:.1f} on "
            f"{os.cpu_count()} cores"
        )
        targets = target_rows(banks, explorer, model)
        if args.markdown:
            write_markdown(args.markdown, targets, header, command)
    if args.only == "banks":
        if args.json:
            print(json.dumps({"banks": banks, "explorer": explorer, "model": model}, indent=2))
        else:
            print_banks(banks, explorer)
            print_targets(targets, header)
        return 0

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
        out |= {"banks": banks, "explorer": explorer, "model": model} if banks else {}
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
        ("ratio", "recorded_speedup", ".1f"),
        ("stepwise", "stepwise_us_per_step", ".2f"),
    ]
    print(f"{'':34s}" + "".join(f"{h:>10s}" for h, _, _ in cols))
    for r in rows:
        print(f"{r['policy']:34s}" + "".join(f"{cell(r, k, f):>10s}" for _, k, f in cols))
    print(
        "\nreplay targets — one replay (metrics, no snapshots) >= 25x the card's pure-Python "
        "replay, a recorded replay >= 10x (ratios of medians, this run):"
    )
    for r in rows:
        if "replay_speedup" in r:
            met = r["replay_speedup"] >= 25 and r["recorded_speedup"] >= 10
            print(
                f"  {r['policy']:34s} {r['replay_speedup']:6.1f}x {r['recorded_speedup']:6.1f}x"
                f"  {'met' if met else 'NOT met'} (stepwise loop: "
                f"{r['card_replay_us_per_step'] / r['stepwise_us_per_step']:.1f}x)"
            )
    floor = rows[0].get("numpy_floor_us_per_step")
    if floor:
        print(f"\nbare numpy calls of one H2O step (no policy object): {floor:.2f} µs")
    print("\nH2O (recent_window=32) by budget, µs per step")
    print(f"{'budget':>8s}" + "".join(f"{h:>10s}" for h, _, _ in cols[:6]))
    for r in scaling:
        print(f"{r['budget']:8d}" + "".join(f"{cell(r, k, f):>10s}" for _, k, f in cols[:6]))
    if banks:
        print_banks(banks, explorer)
        print_targets(targets, header)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
