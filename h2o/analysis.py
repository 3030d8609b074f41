"""Comparisons built from replays: the policy table, the recentWindow sweep, mass vs budget.

Shared by the CLI and the app so both show the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import Any

import numpy as np

from .bank import bank_key, make_bank, replay_bank
from .policies import POLICIES, Policy
from .policies.registry import BUILT_IN, make_policy, policy_params, refusal
from .progress import Progress
from .replay import replay
from .trace import Trace


def standard_lineup(
    budget: int, windows: Iterable[int] = (32, 64), trace: Trace | None = None
) -> list[tuple[str, dict]]:
    """The policies of ``python -m h2o bench``: every built-in method that can run on ``trace``
    (:meth:`~h2o.policies.Policy.runs_on`: K-norm needs its key norms; with no trace, the
    methods that read attention alone), in the registry's order, at the settings its class names
    (:meth:`~h2o.policies.Policy.bench_settings`: H2O and Scissorhands once per window).

    Windows that do not fit the budget are dropped; if none fits, a quarter of the budget is used
    (so small traces such as the stale spike still get a table).
    """
    ws = [w for w in windows if w < budget] or [budget // 4]
    return [
        (cls.name, s)
        for cls in BUILT_IN
        if cls.runs_on(trace) and not cls.selects  # Quest holds every position: not compared
        for s in cls.bench_settings(budget, ws)
    ]


def hindsight_notes(names: Iterable[str]) -> list[str]:
    """What the methods of a lineup know that a decoder would not (:attr:`Policy.hindsight`),
    one sentence each, for a note beside a table that ranks them with the others."""
    seen = dict.fromkeys(n for n in names if n in POLICIES and POLICIES[n].hindsight)
    return [f"{POLICIES[n].hindsight}." for n in seen]


def _meta_int(meta: dict[str, Any], key: str, default: int, lo: int) -> int:
    """``meta[key]`` if it is a whole number >= ``lo`` (metadata may come from any upload)."""
    v = meta.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int | np.integer | float):
        return default
    if isinstance(v, float) and not (np.isfinite(v) and v == int(v)):
        return default
    return int(v) if v >= lo else default


def suggested(trace: Trace) -> dict[str, int]:
    """Default budget, recent_window, sinks and top-k for a trace.

    The trace's metadata may suggest them (the small lesson traces do); otherwise, and whenever
    a suggestion is not a usable number, a budget of 256 or a quarter of a shorter trace, the
    card's window of 32 (at most a quarter of the budget), 4 sinks and top-32 recall. The result
    always fits: window and sinks below the budget, budget below the trace length when possible.
    """
    meta, most = trace.meta, trace.steps - 1  # a budget of T - 1 already evicts once
    budget = min(_meta_int(meta, "suggested_budget", min(256, max(1, trace.steps // 4)), 1), most)
    window = _meta_int(meta, "suggested_recent_window", min(32, budget // 4), 0)
    return {
        "budget": budget,
        "recent_window": min(window, budget - 1),
        "top_k": min(_meta_int(meta, "suggested_top_k", max(1, min(32, budget // 2)), 1), most),
        "sinks": min(_meta_int(meta, "sinks", 4, 0), budget - 1),
    }


def band_width(trace: Trace) -> int | None:
    """The trace's recency band width from its metadata (the canonical trace's 64), if usable."""
    width = _meta_int(trace.meta, "band", 0, 1)
    return width or None


def describe(name: str, params: dict[str, int]) -> str:
    """``"H2O (recent_window=32)"``-style label."""
    label = POLICIES[name].label
    inner = ", ".join(f"{k}={v}" for k, v in params.items() if k != "budget")
    return f"{label} ({inner})" if inner else label


def _row(name: str, policy: Policy, summary: dict[str, float]) -> dict:
    return {
        "policy": name,
        "label": describe(name, policy.params()),
        "reads_attention": policy.reads_attention,
        "budget": policy.budget,
        **{k: v for k, v in policy.params().items() if k != "budget"},
        "retained_mass": summary["retained_mass"],
        "top_k_recall": summary["top_k_recall"],
        "oracle_mass": summary["oracle_mass"],
    }


def replay_rows(
    jobs: Iterable[tuple[str, dict[str, int], int]],
    trace: Trace,
    top_k: int = 32,
    progress: Progress | None = None,
) -> list[dict]:
    """Summary rows (means over steps ``t >= budget``) of each ``(name, params, budget)`` job,
    in order — the numbers of one ``replay(make_policy(...), record=False)`` per job, computed
    in lock-step banks: one per kind of policy and budget (:mod:`h2o.bank`); a policy no bank
    holds (one loaded from a file) gets its own replay.

    Every job's policy is built first, so a refused one raises ``ValueError`` before anything
    is replayed.
    """
    jobs = list(jobs)
    policies = [make_policy(name, budget, **params) for name, params, budget in jobs]
    banks: dict[tuple, list[int]] = {}
    for i, p in enumerate(policies):
        try:
            key: tuple = (bank_key(p), p.budget)
        except ValueError:  # a policy no bank holds (loaded from a file): its own replay
            key = (None, i)
        banks.setdefault(key, []).append(i)
    rows: list[dict] = [{}] * len(jobs)
    done = 0
    for (kind, _), lanes in banks.items():
        name, _, budget = jobs[lanes[0]]
        label = describe(name, policies[lanes[0]].params())
        if len(lanes) > 1:
            label = f"{POLICIES[name].label} ×{len(lanes)}"
        label += f" at budget {budget}"
        at = None
        if progress:  # rows done so far, plus this bank's lanes as its steps advance
            at = partial(_steps_done, progress, done, len(lanes), len(jobs), label)
            progress(done, len(jobs), label)
        if kind is None:
            reps = [replay(policies[lanes[0]], trace, top_k, record=False)]
        else:
            reps = replay_bank(make_bank([policies[i] for i in lanes]), trace, top_k, at)
        for i, rep in zip(lanes, reps, strict=True):
            rows[i] = _row(jobs[i][0], policies[i], rep.summary())
        done += len(lanes)
    if progress:
        progress(len(jobs), len(jobs), "done")
    return rows


def _steps_done(
    progress: Progress,
    start: int,
    lanes: int,
    total: int,
    label: str,
    t: int,
    steps: int,
    _what: str = "",
) -> None:
    progress(start + lanes * t // steps, total, label)


def bench(
    trace: Trace,
    budget: int = 256,
    top_k: int = 32,
    lineup: Iterable[tuple[str, dict[str, int]]] | None = None,
    progress: Progress | None = None,
) -> list[dict]:
    """Summary rows (means over steps ``t >= budget``) for each policy of the lineup."""
    lineup = list(lineup if lineup is not None else standard_lineup(budget, trace=trace))
    return replay_rows(((n, p, budget) for n, p in lineup), trace, top_k, progress)


def sweep_windows(
    trace: Trace,
    policy: str = "h2o",
    windows: Iterable[int] = range(0, 193, 8),
    budget: int = 256,
    top_k: int = 32,
    progress: Progress | None = None,
) -> list[dict]:
    """Mass and recall against ``recent_window`` (windows ``>= budget`` are skipped)."""
    if "recent_window" not in policy_params(policy):
        raise ValueError(f"{policy} has no recent_window to sweep")
    ws = [w for w in windows if 0 <= w < budget]
    if not ws:
        raise ValueError(f"no window in the range is below the budget {budget}")
    return replay_rows(((policy, {"recent_window": w}, budget) for w in ws), trace, top_k, progress)


def budget_curve(
    trace: Trace,
    lineup: Iterable[tuple[str, dict[str, int]]],
    budgets: Iterable[int],
    top_k: int = 32,
    progress: Progress | None = None,
) -> list[dict]:
    """Summary rows for every (policy, budget); combinations a policy refuses are skipped."""
    lineup = list(lineup)  # iterated once per budget
    jobs = [(n, p, b) for b in budgets for n, p in lineup if b < trace.steps]
    return replay_rows(
        [j for j in jobs if refusal(j[0], j[2], **j[1]) is None], trace, top_k, progress
    )


def oracle_curve(trace: Trace, budgets: Iterable[int]) -> dict[int, float]:
    """Mean oracle mass (steps ``t >= budget``) for each budget."""
    return {b: float(np.mean(trace.oracle_mass(b)[b:])) for b in budgets if b < trace.steps}


def band_share(trace: Trace, width: int) -> float:
    """Mean mass on the most recent ``width`` positions, over the steady state: steps after
    ``width`` (before it, every row lies wholly within the band, which says nothing). Falls back
    to every step for a trace no longer than ``width``."""
    mass = trace.recent_mass(width)
    steady = mass[width + 1 :]
    return float(steady.mean() if steady.size else mass[1:].mean())
