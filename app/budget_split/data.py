"""The data of "Where should the budget go?": shipped results, and the model runs that remake them.

The page opens on ``traces/results/allocation-*.json`` (made by the commands in that folder's
README), so nothing runs the model on page load. The functions below run it only after a click,
one job at a time for the whole server (:mod:`app.jobs`), and are Streamlit-cached per run:
another student asking for the same run gets the result without a second computation.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import streamlit as st

from app import model_runs
from h2o.alloc import ALLOCATORS, make_allocator

ALLOCATIONS = tuple(ALLOCATORS)  # uniform, pyramid, adaptive, duo
QUALITY_FILE = "allocation-quality.json"
#: ``generate`` answers at these average budgets per head, one file each.
ANSWER_BUDGETS = (128, 256)
#: The text duo ranks its heads on (another text than the one it is measured on).
CALIBRATION = "library"
#: SmolLM2-135M's shape (checked against the shipped file's grids by the tests).
N_LAYERS, N_KV_HEADS, HEAD_DIM = 30, 3, 64


def quality() -> dict | None:
    """``allocation-quality.json``, or None."""
    res = model_runs.shipped_result(QUALITY_FILE)
    return res if isinstance(res, dict) and isinstance(res.get("runs"), list) else None


def answers(budget: int) -> list[dict] | None:
    """``allocation-generate-<budget>.json``: one entry per policy × allocation, or None."""
    res = model_runs.shipped_result(f"allocation-generate-{budget}.json")
    return res if isinstance(res, list) else None


#: SmolLM2-135M's cache shape, as :meth:`h2o.model.rows.Row.kv_bytes` reads a model's config.
SHAPE = SimpleNamespace(n_layers=N_LAYERS, n_kv_heads=N_KV_HEADS, head_dim=HEAD_DIM)


def held_bytes(name: str, budget: int, n_tokens: int, policy: str = "h2o") -> int:
    """What ``policy`` under allocation ``name`` at ``budget`` slots per head holds after
    ``n_tokens``: :meth:`h2o.model.rows.Row.kv_bytes`, the one count every page uses (fp16 keys
    and values, and the policy's own bytes per slot) — the ``kv_bytes`` of the shipped files
    and of the runs below (:func:`h2o.model.rows.held_bytes` on the model)."""
    from h2o.model.rows import Row

    return Row.parse(f"{policy}@{budget}/{name}").kv_bytes(SHAPE, n_tokens)


def allocation_grids(budget: int, calibration_rest: np.ndarray) -> dict[str, Any]:
    """Every allocator's :class:`h2o.alloc.Allocation` for SmolLM2's shape at ``budget`` per
    head on average (``calibration_rest``: duo's per-KV-head shares). Pure numpy, instant."""
    return {
        name: make_allocator(name).allocate(
            N_LAYERS, N_KV_HEADS, budget, head_dim=HEAD_DIM, shares=calibration_rest
        )
        for name in ALLOCATIONS
    }


# -- recomputing on this server (after a click) ---------------------------------------------------
@st.cache_data(show_spinner=False, max_entries=8)
def calibration_rest(name: str, mtime_ns: int, n_tokens: int | None) -> np.ndarray:
    """Duo's calibration: each KV head's share of attention outside the sinks and the recent
    window on a text's first ``n_tokens`` tokens (all of it for None; one full-cache prefill)."""
    from h2o.model.allocation import N_RECENT, N_SINKS, head_shares

    ids = model_runs.text_ids(name, mtime_ns, n_tokens)
    what = f"Calibrating duo's head classes on {len(ids):,} tokens of {name}"
    bar = st.progress(0.0, text=f"{what}…")
    with model_runs.queued(what, bar):
        bar.empty()
        bar, cb = model_runs.layer_progress(what)
        shares = head_shares(model_runs.model(), ids, N_SINKS, N_RECENT, progress=cb)
    bar.empty()
    return shares.kv_rest()


def _allocation(allocation: str, budget: int, rest: tuple[tuple[float, ...], ...]) -> Any:
    from h2o.model.allocation import make_allocation

    return make_allocation(model_runs.model(), allocation, budget, np.asarray(rest))


@st.cache_data(show_spinner=False, max_entries=128)
def perplexity_run(
    name: str,
    mtime_ns: int,
    n_tokens: int,
    policy: str,
    allocation: str,
    budget: int,
    rest: tuple[tuple[float, ...], ...],
    _index: int = 1,
    _total: int = 1,
) -> dict[str, Any]:
    """Closed-loop perplexity of ``policy`` under ``allocation`` at ``budget`` per head."""
    from h2o.model import perplexity_under_eviction
    from h2o.model.allocation import allocated_factory

    ids = model_runs.text_ids(name, mtime_ns, n_tokens)
    alloc = _allocation(allocation, budget, rest)
    factory, notes = allocated_factory(policy, alloc)
    label = f"{policy} / {allocation} @ {budget}"
    bar, cb = model_runs.run_bar(f"Perplexity, {label}", _index, _total)
    with model_runs.queued(f"perplexity, {label}", bar, (_index - 1) / _total):
        res = perplexity_under_eviction(model_runs.model(), ids, factory, progress=cb, label=label)
    bar.empty()
    return {
        "policy": policy,
        "allocation": allocation,
        "budget_per_head": budget,
        "kv_bytes": held_bytes(allocation, budget, res.n_tokens, policy),
        "perplexity": res.perplexity,
        "n_tokens": res.n_tokens,
        "seconds": res.seconds,
        "notes": list(notes),
    }


@st.cache_data(show_spinner=False, max_entries=128)
def answer_run(
    name: str,
    mtime_ns: int,
    policy: str,
    allocation: str | None,
    budget: int,
    rest: tuple[tuple[float, ...], ...],
    max_new: int,
    _index: int = 1,
    _total: int = 1,
) -> dict[str, Any]:
    """The greedy answer to a whole shipped text, with ``policy`` under ``allocation``
    (``policy="full"``: the full cache; ``"snapkv"``: compressed once after the prompt)."""
    from h2o.model.allocation import allocated_factory
    from h2o.model.generate import generate
    from h2o.model.snapkv import snapkv_generate
    from h2o.policies.snapkv import DEFAULT_KERNEL, DEFAULT_WINDOW

    ids = model_runs.text_ids(name, mtime_ns)
    alloc = None if policy == "full" else _allocation(str(allocation), budget, rest)
    label = "full cache" if alloc is None else f"{policy} / {allocation} @ {budget}"
    bar, cb = model_runs.run_bar(f"Generating, {label}", _index, _total)
    with model_runs.queued(f"generation, {label}", bar, (_index - 1) / _total):
        if alloc is None:
            res = generate(model_runs.model(), ids, max_new, None, cb, label=label)
        elif policy == "snapkv":
            res = snapkv_generate(
                model_runs.model(),
                ids,
                alloc,
                max_new,
                DEFAULT_WINDOW,
                DEFAULT_KERNEL,
                cb,
                label=label,
            )
        else:
            factory, _ = allocated_factory(policy, alloc)
            res = generate(model_runs.model(), ids, max_new, factory, cb, label=label)
    bar.empty()
    return {
        "policy": policy,
        "allocation": allocation,
        "budget": budget,
        "kv_bytes": None
        if alloc is None
        else held_bytes(str(allocation), budget, len(ids), policy),
        "text": res.text,
        "seconds": res.seconds,
    }
