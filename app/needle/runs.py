"""Recompute one needle cell on this server: ``h2o.needle.cells.run_cell`` through the model
queue (one job at a time for the class), cached per cell and shared by every session."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import streamlit as st

from app import model_runs, state
from h2o.needle.results import Cell

#: What identifies a cell for ``run_cell``: the row's label and the cell's position and needle.
SPEC_FIELDS = ("row", "length", "depth", "needle")


def spec_of(cell: Cell) -> dict[str, Any]:
    return {k: getattr(cell, k) for k in SPEC_FIELDS}


def run_cell_function() -> Callable[..., Any] | None:
    """``h2o.needle.cells.run_cell`` if the library has it (imported on first use: it loads
    the model's code), else None."""
    try:
        mod = importlib.import_module("h2o.needle.cells")
    except ImportError:
        return None
    fn = getattr(mod, "run_cell", None)
    return fn if callable(fn) else None


def _plain(res: Any) -> dict[str, Any]:
    """The result as plain data (a dict, or a dataclass's fields)."""
    if isinstance(res, dict):
        return dict(res)
    if hasattr(res, "__dataclass_fields__"):
        return {k: getattr(res, k) for k in res.__dataclass_fields__}
    raise ValueError(f"run_cell returned {type(res).__name__}, not a cell")


@st.cache_data(show_spinner=False, max_entries=64)
def recompute(row: str, length: int, depth: int, needle: str) -> dict[str, Any]:
    """One cell, run again: the same fields as a line of ``needle-grid.jsonl``."""
    fn = run_cell_function()
    if fn is None:
        raise ValueError("this copy of the library has no h2o.needle.cells.run_cell")
    what = f"needle cell {state.md(row, 40)}, {length:,} tokens, depth {depth} %"
    bar = st.progress(0.0, text=f"{what}…")
    with model_runs.queued(what, bar):
        bar.progress(0.5, text=f"Running {what} (model loaded on first use)…")
        spec = {"row": row, "length": length, "depth": depth, "needle": needle}
        # The server's own model (one copy for the class), not a second one for this cell.
        res = _plain(fn(spec | {"model": str(model_runs.model_path())}, load=model_runs.model))
    bar.empty()
    return res
