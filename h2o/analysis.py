"""Comparisons built from replays: the policy table, the recentWindow sweep, mass vs budget.

Shared by the CLI and the app so both show the same numbers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from .policies import POLICIES, Policy
from .replay import replay
from .trace import Trace

Progress = Callable[[int, int, str], None] | None
"""Optional callback ``progress(done, total, label)``."""


def make_policy(name: str, budget: int, **params: Any) -> Policy:
    """Build ``POLICIES[name]`` with the keyword parameters it accepts; others are ignored.

    So ``make_policy("streaming-llm", 256, recent_window=32, sinks=4)`` works from one set of
    controls. ``None`` values are dropped (the policy's default applies).
    """
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
    cls = POLICIES[name]
    accepted = inspect.signature(cls.__init__).parameters
    kw = {k: v for k, v in params.items() if k in accepted and v is not None}
    return cls(budget, **kw)  # rng passes through: every policy accepts one


def refusal(name: str, budget: int, **params: Any) -> str | None:
    """Why ``make_policy(name, budget, **params)`` would be refused (naming the fix), or None."""
    try:
        make_policy(name, budget, **params)
    except ValueError as e:
        label = POLICIES[name].label if name in POLICIES else name
        return f"{label} refuses these settings: {e}."
    return None


def policy_params(name: str) -> list[str]:
    """The tunable keyword parameters of a policy (besides ``budget`` and ``rng``)."""
    sig = inspect.signature(POLICIES[name].__init__).parameters
    return [k for k in sig if k not in ("self", "budget", "rng")]


def standard_lineup(budget: int, windows: Iterable[int] = (32, 64)) -> list[tuple[str, dict]]:
    """The policies of ``python -m h2o bench``: each baseline, H2O and Scissorhands per window.

    Windows that do not fit the budget are dropped; if none fits, a quarter of the budget is used
    (so small traces such as the stale spike still get a table).
    """
    ws = [w for w in windows if w < budget] or [budget // 4]
    return [
        *(("h2o", {"recent_window": w}) for w in ws),
        *(("scissorhands", {"recent_window": w}) for w in ws),
        ("tova", {"recent_window": 1}),
        ("streaming-llm", {"sinks": min(4, budget - 1)}),
        ("sliding-window", {}),
        ("random", {"recent_window": ws[0]}),
    ]


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


def _row(name: str, params: dict[str, int], trace: Trace, budget: int, top_k: int) -> dict:
    p = make_policy(name, budget, **params)
    s = replay(p, trace, top_k=top_k, record=False).summary()
    return {
        "policy": name,
        "label": describe(name, p.params()),
        "reads_attention": p.reads_attention,
        "budget": budget,
        **{k: v for k, v in p.params().items() if k != "budget"},
        "retained_mass": s["retained_mass"],
        "top_k_recall": s["top_k_recall"],
        "oracle_mass": s["oracle_mass"],
    }


def bench(
    trace: Trace,
    budget: int = 256,
    top_k: int = 32,
    lineup: Iterable[tuple[str, dict[str, int]]] | None = None,
    progress: Progress = None,
) -> list[dict]:
    """Summary rows (means over steps ``t >= budget``) for each policy of the lineup."""
    lineup = list(lineup if lineup is not None else standard_lineup(budget))
    rows = []
    for i, (name, params) in enumerate(lineup):
        if progress:
            progress(i, len(lineup), describe(name, params))
        rows.append(_row(name, params, trace, budget, top_k))
    if progress:
        progress(len(lineup), len(lineup), "done")
    return rows


def sweep_windows(
    trace: Trace,
    policy: str = "h2o",
    windows: Iterable[int] = range(0, 193, 8),
    budget: int = 256,
    top_k: int = 32,
    progress: Progress = None,
) -> list[dict]:
    """Mass and recall against ``recent_window`` (windows ``>= budget`` are skipped)."""
    if "recent_window" not in policy_params(policy):
        raise ValueError(f"{policy} has no recent_window to sweep")
    ws = [w for w in windows if 0 <= w < budget]
    if not ws:
        raise ValueError(f"no window in the range is below the budget {budget}")
    rows = []
    for i, w in enumerate(ws):
        if progress:
            progress(i, len(ws), f"{policy} recent_window={w}")
        rows.append(_row(policy, {"recent_window": w}, trace, budget, top_k))
    if progress:
        progress(len(ws), len(ws), "done")
    return rows


def budget_curve(
    trace: Trace,
    lineup: Iterable[tuple[str, dict[str, int]]],
    budgets: Iterable[int],
    top_k: int = 32,
    progress: Progress = None,
) -> list[dict]:
    """Summary rows for every (policy, budget); combinations a policy refuses are skipped."""
    lineup = list(lineup)  # iterated once per budget
    jobs = [(n, p, b) for b in budgets for n, p in lineup if b < trace.steps]
    rows = []
    for i, (name, params, b) in enumerate(jobs):
        if progress:
            progress(i, len(jobs), f"{describe(name, params)} budget {b}")
        try:
            rows.append(_row(name, params, trace, b, top_k))
        except ValueError:  # e.g. recent_window >= budget at the small end
            continue
    if progress:
        progress(len(jobs), len(jobs), "done")
    return rows


def oracle_curve(trace: Trace, budgets: Iterable[int]) -> dict[int, float]:
    """Mean oracle mass (steps ``t >= budget``) for each budget."""
    return {b: float(np.mean(trace.oracle_mass(b)[b:])) for b in budgets if b < trace.steps}


def band_share(trace: Trace, width: int) -> float:
    """Mean mass on the most recent ``width`` positions, over steps ``1..T-1``."""
    return float(trace.recent_mass(width)[1:].mean())
