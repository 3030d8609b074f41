"""Every sentence of the needle pages that states a number, a ranking or a winner, built from the
numbers shown beside it (never typed in), so it stays true when a row is added or recomputed.

No streamlit here: ``tests/test_claims_needle.py`` calls these at every choice the pages offer and
checks them against values it computes itself. Strings from the result files (row labels,
families) are escaped for markdown (:func:`app.real_model.claims.esc`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from app.needle.data import Cell
from app.needle.frontier import GROUPS, Point
from app.needle.grid import RowScore
from app.real_model.claims import esc, names

#: The share of cells the full cache should answer at ≤ :data:`FULL_MAX_LENGTH` tokens (issue 17).
FULL_TARGET, FULL_MAX_LENGTH = 0.9, 2048


@dataclass(frozen=True)
class Metric:
    """What the y axis measures: perplexity (lower is better) or needle accuracy."""

    name: str
    lower_better: bool

    def value(self, p: Point) -> str:
        if self.lower_better:
            return f"perplexity {p.y:.2f}"
        return f"{p.y:.0%} of {p.n} needle cells right"

    def gap(self, win: Point, lose: Point) -> str:
        if self.lower_better:
            return f"{lose.y - win.y:.2f} perplexity ({1 - win.y / lose.y:.1%} lower)"
        return f"{(win.y - lose.y) * 100:.0f} percentage points"


PERPLEXITY = Metric("perplexity", lower_better=True)
ACCURACY = Metric("needle accuracy", lower_better=False)


def label(p: Point) -> str:
    """``H2O (h2o@256)``: the family and the row, escaped."""
    return esc(p.family) if p.family == p.row else f"{esc(p.family)} ({esc(p.row)})"


def _key(metric: Metric):
    return lambda p: (p.y if metric.lower_better else -p.y, p.x, p.row)


def within(points: Iterable[Point], limit: int) -> list[Point]:
    """The rows (not the full cache) that hold at most ``limit`` bytes per token (rounded)."""
    return [p for p in points if p.group != "full" and round(p.x) <= limit]


def best(points: Iterable[Point], limit: int, metric: Metric) -> dict[str, Point]:
    """Group → its best row within ``limit`` (ties: fewer bytes, then the label)."""
    out: dict[str, Point] = {}
    for p in sorted(within(points, limit), key=_key(metric)):
        out.setdefault(p.group, p)
    return out


def verdict(points: Sequence[Point], limit: int, metric: Metric) -> str:
    """The equal-memory answer at ``limit`` bytes per token: each group's best row that fits,
    and which group wins, by how much."""
    full = min((p for p in points if p.group == "full"), key=lambda p: p.order, default=None)
    head = f"At most {limit:,} KV bytes per token"
    if full is not None:
        head += (
            f" ({limit / full.x:.0%} of the full cache's {full.x:,.0f}, which has "
            f"{metric.value(full)})"
        )
    bests = best(points, limit, metric)
    parts = []
    for g, name in GROUPS.items():
        mine = [p for p in points if p.group == g]
        if g in bests:
            b = bests[g]
            said = f"{metric.value(b)} at {b.x:,.0f} bytes per token"
            parts.append(f"the best {name} row is {label(b)}, {said}")
        elif mine:
            small = min(mine, key=lambda p: p.x)
            parts.append(f"no {name} row fits (the smallest holds {small.x:,.0f})")
    if not parts:
        return f"{head}: the file has no row but the full cache to compare yet."
    if not bests:
        return f"{head}: {'; '.join(parts)}."
    text = f"{head}: {'; '.join(parts)}."
    if len(bests) == 1:
        (g,) = bests
        return f"{text} Only {GROUPS[g]} fits in this memory."
    win = min(bests.values(), key=_key(metric))
    beats, ties = [], []
    for g, b in bests.items():
        if b is win:
            continue
        if b.y == win.y:
            ties.append(f"the best {GROUPS[g]} row")
        else:
            beats.append(f"the best {GROUPS[g]} row by {metric.gap(win, b)}")
    said = f" {GROUPS[win.group][0].upper()}{GROUPS[win.group][1:]} wins on {metric.name}: "
    said += f"{label(win)} beats {names(beats)}" if beats else f"{label(win)}"
    if ties:
        said += (", and " if beats else " ") + f"ties with {names(ties)}"
    return text + said + "."


# -- the needle grid -------------------------------------------------------------------------------
def _ints(xs: Iterable[int]) -> str:
    return names([f"{x:,}" for x in xs])


def shown_sentence(
    shown: Sequence[str],
    in_file: Sequence[str],
    cells: Sequence[Cell],
    planned: Sequence[str] | None = None,
) -> str:
    """What the heatmaps show: which rows of the file, at which lengths and depths, how many
    cells and needles; and the rows the run planned (its sidecar) that the file lacks."""
    mine = [c for c in cells if c.row in set(shown)]
    lens = sorted({c.length for c in mine})
    deps = sorted({c.depth for c in mine})
    needles = len({c.needle for c in mine})
    text = (
        f"Shown: {len(shown)} of the {len(in_file)} rows in the file "
        f"({names([esc(r) for r in shown])})"
    )
    if mine:
        text += (
            f", at lengths {_ints(lens)} tokens and depths {_ints(deps)} %: {len(mine):,} cells, "
            f"{needles} distinct needle{'s' if needles != 1 else ''}."
        )
    else:
        text += ": no cells."
    if planned:
        lacking = [r for r in planned if r not in set(in_file)]
        if lacking:
            listed = names([esc(r) for r in lacking[:6]]) + (" …" if len(lacking) > 6 else "")
            text += (
                f" The run planned {len(planned)} rows; {len(lacking)} are not in the file yet "
                f"({listed})."
            )
    return text


def scores_sentence(scores: Sequence[RowScore]) -> str:
    """Per row: cells right and mean log-prob; then the most and least accurate."""
    if not scores:
        return ""
    parts = [
        f"{esc(s.row)}: {s.right} of {s.cells} right ({s.accuracy:.0%}), mean log-prob "
        f"{s.mean_logprob:.2f}"
        for s in scores
    ]
    text = "Row by row — " + "; ".join(parts) + "."
    accs = [s.accuracy for s in scores]
    if len(scores) > 1 and max(accs) > min(accs):
        top = [esc(s.row) for s in scores if s.accuracy == max(accs)]
        low = [esc(s.row) for s in scores if s.accuracy == min(accs)]
        text += f" Most accurate: {names(top)}; least: {names(low)}."
    elif len(scores) > 1:
        text += f" Every row shown answers {accs[0]:.0%}."
    return text


def full_note(cells: Sequence[Cell]) -> str:
    """How the full cache does: at ≤ 2,048 tokens against the 90 % the grid's format aims for,
    and at each longer length in the file."""
    full = [c for c in cells if c.kind == "full"]
    if not full:
        return (
            "The full-cache row is not in the file, so nothing here shows what the model answers "
            "with every token kept."
        )
    short = [c for c in full if c.length <= FULL_MAX_LENGTH]
    text = "With the full cache the model answers "
    if short:
        r = sum(c.correct for c in short)
        text += f"{r} of {len(short)} cells at ≤ {FULL_MAX_LENGTH:,} tokens ({r / len(short):.0%})"
        if r / len(short) < FULL_TARGET:
            text += f", short of the {FULL_TARGET:.0%} its prompt format aims for"
    longer = sorted({c.length for c in full if c.length > FULL_MAX_LENGTH})
    for n in longer:
        cs = [c for c in full if c.length == n]
        r = sum(c.correct for c in cs)
        text += ("; at " if short else "at ") + f"{n:,} tokens {r} of {len(cs)} ({r / len(cs):.0%})"
    return text + "."


def _spans(xs: Sequence[int]) -> str:
    out: list[tuple[int, int]] = []
    for x in sorted(xs):
        if out and out[-1][1] == x - 1:
            out[-1] = (out[-1][0], x)
        else:
            out.append((x, x))
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in out) or "none"


def held_sentence(held: Sequence[float] | None) -> str:
    """At the question, per layer, the share of KV heads that still held every needle token."""
    if held is None:
        return "This row evicts nothing: every head of every layer held the needle's tokens."
    h = np.asarray(held, dtype=np.float64)
    n = h.size
    if n == 0:
        return "The cell records no layers."
    whole = [i for i in range(n) if h[i] >= 1.0]
    none_ = [i for i in range(n) if h[i] <= 0.0]
    text = (
        f"At the question, every KV head still held all of the needle's tokens in {len(whole)} "
        f"of {n} layers"
    )
    if 0 < len(whole) < n:
        text += f" ({_spans(whole)})"
    text += f"; no head did in {len(none_)}"
    if 0 < len(none_) < n:
        text += f" ({_spans(none_)})"
    return text + f". On average {h.mean():.0%} of a layer's heads held it."
