"""Comparisons of many replays for the pages, kept as small plain data: the recentWindow
sweep, the policy table, mass against the budget, the band share, what two caches share.

Each runs the library's sweeps (:mod:`h2o.analysis`, banks underneath) once per server with a
progress bar that the session computing it sees moving; every later call, from any session, is a
lookup that sends nothing. (``st.cache_data`` replayed every update of the bar, and unpickled the
result, on every hit: a page of every policy re-sent 46 bar updates to each student on each run.)
The results are shared between sessions: read them, never change them.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

import numpy as np
import streamlit as st

import h2o
from app.bytecache import ByteCache
from app.data import memo
from h2o import analysis
from h2o.progress import Progress

T = TypeVar("T")

#: The sweeps' results by (which, trace ident, parameters), up to 32 MB for the server (a result
#: is a few kB: a sweep's rows).
RESULTS: ByteCache[Any] = ByteCache(32 * 2**20, lambda v: len(pickle.dumps(v)))


def computed(key: Hashable, total: int, what: str, run: Callable[[Callable], T]) -> T:
    """``run(at)`` once per server for ``key``, ``at`` feeding a progress bar of ``total`` steps
    (:func:`bar_progress`) shown only while it runs; the stored result afterwards."""

    def make() -> T:
        bar, at = bar_progress(total, what)
        try:
            return run(at)
        finally:
            bar.empty()

    return RESULTS.get(key, make)


def bar_progress(total: int, what: str) -> tuple[Any, Callable[[int], Progress]]:
    """An ``st.progress`` bar and a factory of library progress callbacks feeding it."""
    bar = st.progress(0.0, text=f"{what}…")

    def at(offset: int) -> Progress:
        def cb(done: int, _n: int, label: str) -> None:
            frac = min(1.0, (offset + done) / max(total, 1))
            bar.progress(frac, text=f"{what}: {label} ({offset + done}/{total})")

        return cb

    return bar, at


def sweep_windows_for(budget: int, band: int | None) -> list[int]:
    """The recent_window values to sweep at ``budget``: 0 to 3/4 of it, plus 32 and the band."""
    step = max(1, budget // 32)
    top = max(0, (3 * budget) // 4)
    ws = set(range(0, top + 1, step))
    ws.update(w for w in (32, band) if w is not None and w < budget)
    return sorted(w for w in ws if w < budget)


def window_sweep(
    ident: str,
    trace: h2o.Trace,
    budget: int,
    top_k: int,
    windows: tuple[int, ...],
    sinks: int,
) -> dict[str, list[dict]]:
    """H2O and Scissorhands against recent_window, with StreamingLLM and sliding window."""
    n = len(windows)

    def run(at: Callable[[int], Progress]) -> dict[str, list[dict]]:
        out = {
            name: analysis.sweep_windows(trace, name, windows, budget, top_k, progress=at(i * n))
            for i, name in enumerate(("h2o", "scissorhands"))
        }
        lineup = [("streaming-llm", {"sinks": sinks}), ("sliding-window", {})]
        out["refs"] = analysis.bench(trace, budget, top_k, lineup=lineup, progress=at(2 * n))
        return out

    key = ("window_sweep", ident, budget, top_k, windows, sinks)
    return computed(key, 2 * n + 2, "Replaying the sweep", run)


def bench(
    ident: str, trace: h2o.Trace, budget: int, top_k: int, lineup: tuple | None = None
) -> list[dict]:
    """``analysis.bench`` (the standard lineup unless one is given)."""
    jobs = [(n, dict(p)) for n, p in lineup] if lineup is not None else None
    total = len(jobs) if jobs is not None else len(analysis.standard_lineup(budget))

    def run(at: Callable[[int], Progress]) -> list[dict]:
        return analysis.bench(trace, budget, top_k, lineup=jobs, progress=at(0))

    return computed(("bench", ident, budget, top_k, lineup), total, "Replaying every policy", run)


def budget_curves(
    ident: str, trace: h2o.Trace, lineup: tuple, budgets: tuple[int, ...], top_k: int
) -> tuple[list[dict], dict[int, float]]:
    """Mass and recall per (policy, budget), and the oracle bound per budget."""
    jobs = [(n, dict(p)) for n, p in lineup]

    def run(at: Callable[[int], Progress]) -> tuple[list[dict], dict[int, float]]:
        rows = analysis.budget_curve(trace, jobs, budgets, top_k, progress=at(0))
        return rows, analysis.oracle_curve(trace, budgets)

    key = ("budget_curves", ident, lineup, budgets, top_k)
    return computed(key, len(jobs) * len(budgets), "Replaying every policy at every budget", run)


def band_share(ident: str, trace: h2o.Trace, width: int) -> float:
    """``analysis.band_share``: mean attention on the most recent ``width`` positions."""
    return RESULTS.get(("band_share", ident, width), lambda: analysis.band_share(trace, width))


def region_shares(ident: str, trace: h2o.Trace, *split: int) -> tuple[float, float, float]:
    """``h2o.model.layers.region_shares(trace, *split)`` (sinks, recent, middle) of the trace
    ``ident``, once per server: a prefix sum over the whole trace, which the Real model page and
    the lesson redid for every student on every run."""
    from h2o.model.layers import region_shares as shares  # only pages about the model

    return RESULTS.get(("region_shares", ident, split), lambda: shares(trace, *split))


def freeze_lineup(lineup: Sequence[tuple[str, dict[str, int]]]) -> tuple:
    """A lineup as nested tuples, hashable for the caches above."""
    return tuple((n, tuple(sorted(p.items()))) for n, p in lineup)


def shared_slots(rep_a: h2o.Replay, rep_b: h2o.Replay, trace: h2o.Trace) -> dict[str, float]:
    """How much two replays' caches agree, as means over the steps ``t >= budget``.

    ``share``: the fraction of slots both hold; ``both``/``only_a``/``only_b``: the attention mass
    (of the full-cache row) on the positions both hold, or only one of them holds.
    """

    def compute() -> dict[str, float]:
        acc = {"share": [], "both": [], "only_a": [], "only_b": []}
        for t in range(rep_a.budget, rep_a.steps):
            a, _ = rep_a.kept_at(t)
            b, _ = rep_b.kept_at(t)
            a, b = a[a < t], b[b < t]  # the row attends to positions before t
            row = trace.row(t)
            common = np.intersect1d(a, b, assume_unique=True)
            acc["share"].append(common.size / max(a.size, 1))
            acc["both"].append(row[common].sum(dtype=np.float64))
            acc["only_a"].append(row[np.setdiff1d(a, b, assume_unique=True)].sum(dtype=np.float64))
            acc["only_b"].append(row[np.setdiff1d(b, a, assume_unique=True)].sum(dtype=np.float64))
        return {k: float(np.mean(v)) if v else float("nan") for k, v in acc.items()}

    key = ("shared", rep_b.policy, tuple(sorted(rep_b.params.items())), rep_b.top_k)
    return memo(rep_a, key, compute)
