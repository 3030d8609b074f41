"""Comparisons of many replays for the pages, cached as small plain data: the recentWindow
sweep, the policy table, mass against the budget, the band share, what two caches share.

Each runs the library's sweeps (:mod:`h2o.analysis`, banks underneath) once per process with a
progress bar that the first session sees moving; a cache hit is instant for every session.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import streamlit as st

import h2o
from app.data import memo
from h2o import analysis
from h2o.progress import Progress


# -- comparisons (small results, cached as data) ---------------------------------------------------
def bar_progress(total: int, what: str) -> tuple[Any, Callable[[int], Progress]]:
    """An ``st.progress`` bar and a factory of library progress callbacks feeding it.

    Created inside the cached functions below, so a cache hit replays it (ending empty) and the
    first computation shows it moving.
    """
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


@st.cache_data(show_spinner=False, max_entries=64)
def window_sweep(
    ident: str,
    _trace: h2o.Trace,
    budget: int,
    top_k: int,
    windows: tuple[int, ...],
    sinks: int,
) -> dict[str, list[dict]]:
    """H2O and Scissorhands against recent_window, with StreamingLLM and sliding window."""
    n = len(windows)
    bar, at = bar_progress(2 * n + 2, "Replaying the sweep")
    out = {
        name: analysis.sweep_windows(_trace, name, windows, budget, top_k, progress=at(i * n))
        for i, name in enumerate(("h2o", "scissorhands"))
    }
    lineup = [("streaming-llm", {"sinks": sinks}), ("sliding-window", {})]
    out["refs"] = analysis.bench(_trace, budget, top_k, lineup=lineup, progress=at(2 * n))
    bar.empty()
    return out


@st.cache_data(show_spinner=False, max_entries=32)
def bench(
    ident: str, _trace: h2o.Trace, budget: int, top_k: int, lineup: tuple | None = None
) -> list[dict]:
    """``analysis.bench`` (the standard lineup unless one is given)."""
    jobs = [(n, dict(p)) for n, p in lineup] if lineup is not None else None
    total = len(jobs) if jobs is not None else len(analysis.standard_lineup(budget))
    bar, at = bar_progress(total, "Replaying every policy")
    rows = analysis.bench(_trace, budget, top_k, lineup=jobs, progress=at(0))
    bar.empty()
    return rows


@st.cache_data(show_spinner=False, max_entries=16)
def budget_curves(
    ident: str, _trace: h2o.Trace, lineup: tuple, budgets: tuple[int, ...], top_k: int
) -> tuple[list[dict], dict[int, float]]:
    """Mass and recall per (policy, budget), and the oracle bound per budget."""
    jobs = [(n, dict(p)) for n, p in lineup]
    total = len(jobs) * len(budgets)
    bar, at = bar_progress(total, "Replaying every policy at every budget")
    rows = analysis.budget_curve(_trace, jobs, budgets, top_k, progress=at(0))
    oracle = analysis.oracle_curve(_trace, budgets)
    bar.empty()
    return rows, oracle


@st.cache_data(show_spinner=False, max_entries=32)
def band_share(ident: str, _trace: h2o.Trace, width: int) -> float:
    """``analysis.band_share``: mean attention on the most recent ``width`` positions."""
    return analysis.band_share(_trace, width)


@st.cache_data(show_spinner=False, max_entries=32)
def region_shares(ident: str, _trace: h2o.Trace) -> tuple[float, float, float]:
    """``h2o.model.layers.region_shares`` (sinks, recent, middle) of the trace ``ident``, once
    per server: a prefix sum over the whole trace, which the Real model page redid for every
    student on every run."""
    from h2o.model.layers import region_shares as shares  # only pages about the model

    return shares(_trace)


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
