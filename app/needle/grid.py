"""The needle grid's numbers: rows in order, the length × depth matrices, per-row scores.

Pure functions of the cells read from ``needle-grid.jsonl`` (:mod:`h2o.needle.results`): the page
draws what these return and states what :mod:`app.needle.claims` says about the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from h2o.alloc import ALLOCATORS
from h2o.model.rows import kinds as cache_kinds
from h2o.needle.results import Cell, parsed

#: The two things a heatmap can colour: the share of the cell's needles answered right, or the
#: answer's mean teacher-forced log-probability.
METRICS = {"correct": "share answered right", "logprob": "mean log-prob of the answer"}
#: The same, short enough for the page's buttons at 1280x720 (the long form titles the figure).
METRIC_BUTTONS = {"correct": "answered right", "logprob": "log-prob"}


def row_order(rec: Cell | object) -> tuple:
    """Full cache first, then eviction, SnapKV, KIVI-style; by policy, allocation, budget, bits."""
    kind, order = getattr(rec, "kind", ""), cache_kinds()  # the kinds' own order (their rank)
    return (
        order.index(kind) if kind in order else len(order),
        getattr(rec, "bits", None) is not None,
        str(getattr(rec, "policy", None) or ""),
        str(getattr(rec, "allocation", None) or ""),
        getattr(rec, "budget", None) or 0,
        getattr(rec, "bits", None) or 0,
        getattr(rec, "sinks", 0),
        str(getattr(rec, "row", "")),
    )


def _named(row: str) -> str | None:
    known = parsed(row)
    return None if known is None else known.family


def family_name(family: str, allocation: str | None, row: str | None = None) -> str:
    """The row's family as its kind names it (with the recent window it ran with: a file
    written before rows named their window says "H2O" for "H2O, window 32"), else the file's;
    the allocation named as the app names it elsewhere: "H2O (pyramid)" → "H2O, pyramid
    (PyramidKV-style)" (each borrows its paper's split of the budget, not its method)."""
    if row is not None:
        family = _named(row) or family
    if not allocation or allocation == "uniform" or allocation not in ALLOCATORS:
        return family
    return f"{family.replace(f' ({allocation})', '')}, {ALLOCATORS[allocation].label}"


def rows(cells: Iterable[Cell]) -> list[str]:
    """The row labels present, in :func:`row_order`."""
    first: dict[str, Cell] = {}
    for c in cells:
        first.setdefault(c.row, c)
    return [r for r, _ in sorted(first.items(), key=lambda kv: row_order(kv[1]))]


def families(cells: Iterable[Cell]) -> dict[str, str]:
    """Row label → its family (:func:`family_name`)."""
    return {c.row: family_name(c.family, c.allocation, c.row) for c in cells}


def lengths(cells: Iterable[Cell]) -> list[int]:
    return sorted({c.length for c in cells})


def depths(cells: Iterable[Cell]) -> list[int]:
    return sorted({c.depth for c in cells})


def of_row(cells: Iterable[Cell], row: str) -> list[Cell]:
    return [c for c in cells if c.row == row]


def at(cells: Iterable[Cell], row: str, length: int, depth: int) -> list[Cell]:
    """The cells (one per needle) of ``row`` at one length and depth, by needle."""
    return sorted(
        (c for c in cells if c.row == row and c.length == length and c.depth == depth),
        key=lambda c: c.needle,
    )


def matrix(
    cells: Iterable[Cell], row: str, lens: Sequence[int], deps: Sequence[int], metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """``(values, counts)``, both ``(len(deps), len(lens))``: per depth (rows) and length
    (columns) the mean over that position's needles of ``metric`` ("correct": 1 right, 0 wrong;
    "logprob"), NaN where the row has no cell; and how many needles each mean is over."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, not {metric!r}")
    li = {n: i for i, n in enumerate(lens)}
    di = {d: i for i, d in enumerate(deps)}
    total = np.zeros((len(deps), len(lens)))
    count = np.zeros((len(deps), len(lens)), dtype=np.int64)
    for c in cells:
        if c.row != row or c.length not in li or c.depth not in di:
            continue
        v = float(c.correct) if metric == "correct" else c.logprob
        total[di[c.depth], li[c.length]] += v
        count[di[c.depth], li[c.length]] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.where(count > 0, total / np.maximum(count, 1), np.nan)
    return values, count


@dataclass(frozen=True)
class RowScore:
    """One row's score over the cells shown."""

    row: str
    family: str
    cells: int
    right: int
    mean_logprob: float

    @property
    def accuracy(self) -> float:
        return self.right / self.cells if self.cells else float("nan")


def scores(
    cells: Iterable[Cell], shown: Sequence[str], lens: Sequence[int] | None = None
) -> list[RowScore]:
    """Per row of ``shown`` (in that order, rows without cells left out): cells, right, mean
    log-prob, over its cells at ``lens`` (all lengths for None)."""
    keep = None if lens is None else set(lens)
    by: dict[str, list[Cell]] = {r: [] for r in shown}
    for c in cells:
        if c.row in by and (keep is None or c.length in keep):
            by[c.row].append(c)
    return [
        RowScore(
            row=r,
            family=family_name(cs[0].family, cs[0].allocation, cs[0].row),
            cells=len(cs),
            right=sum(c.correct for c in cs),
            mean_logprob=float(np.mean([c.logprob for c in cs])),
        )
        for r, cs in by.items()
        if cs
    ]


def colour_range(cells: Iterable[Cell], shown: Sequence[str], metric: str) -> tuple[float, float]:
    """One colour scale for every panel: 0–1 for "correct", the shown rows' cell-mean range for
    "logprob" (so a colour means the same number in each panel)."""
    if metric == "correct":
        return 0.0, 1.0
    cells = list(cells)
    lens, deps = lengths(cells), depths(cells)
    vals = [matrix(cells, r, lens, deps, metric)[0] for r in shown]
    finite = np.concatenate([v[np.isfinite(v)] for v in vals]) if vals else np.array([])
    if finite.size == 0:
        return -1.0, 0.0
    lo, hi = float(finite.min()), float(finite.max())
    return (lo, hi) if hi > lo else (lo - 0.5, hi + 0.5)


def pick(available: Sequence[str], wanted: Sequence[str], n: int) -> list[str]:
    """Up to ``n`` rows: the ``wanted`` ones that are present, in that order, then the first
    others present."""
    out = [w for w in wanted if w in available]
    out += [r for r in available if r not in out]
    return out[:n]


def clicked(points: object, panels: int) -> tuple[int, int, int] | None:
    """The ``(panel, length, depth)`` of a clicked cell (the heatmaps' selection: its points'
    ``customdata`` is ``[panel, length, depth, …]``); None when nothing usable was clicked. The
    points come from the browser, so anything else is ignored."""
    if not isinstance(points, list | tuple):
        return None
    for p in points:
        cd = p.get("customdata") if isinstance(p, dict) else None
        if not isinstance(cd, list | tuple) or len(cd) < 3:
            continue
        vals = cd[:3]
        if not all(isinstance(v, int | float) and float(v).is_integer() for v in vals):
            continue
        i, length, depth = (int(v) for v in vals)
        if 0 <= i < panels:
            return i, length, depth
    return None
