"""Sentences built from the numbers a figure plots: who leads, how close to the oracle bound,
who falls below random eviction, which policies coincide.

Every number, ranking or "who wins" a student reads next to a policy table comes from here, from
the same rows the chart draws, so the sentence changes when the setting does (tests drive these
at every value of the views' controls). Pure functions: no streamlit, so they are cheap to test.

Labels are used as given: a caller that shows them as markdown escapes them first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Two values "tie" when they agree to the three decimals the sentences print.
TIE = 5e-4

#: One row of a policy table (a bench or sweep summary: label, retained_mass, top_k_recall, ...).
TableRow = Mapping[str, Any]


def join(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def refused_window(shown: Mapping[str, Sequence[int]]) -> str:
    """The policies that refuse the shared recent_window, ``{label: the windows the table shows
    it at}``, in a sentence: "H2O and Scissorhands refuse it, so the table shows them at
    recent_window 32, 64 only" (policies shown at different windows are named apiece)."""
    groups: dict[tuple[int, ...], list[str]] = {}
    for label, ws in shown.items():
        groups.setdefault(tuple(sorted(set(ws))), []).append(label)
    at = [(join(ls), ", ".join(map(str, ws))) for ws, ls in groups.items()]
    verb = "refuses" if len(shown) == 1 else "refuse"
    said = f"{join(list(shown))} {verb} it, so the table shows "
    if len(at) == 1:
        return said + f"{'it' if len(shown) == 1 else 'them'} at recent_window {at[0][1]} only"
    return said + "; ".join(f"{ls} at recent_window {ws}" for ls, ws in at) + " only"


def percent(x: float) -> str:
    """``x`` as a percentage, with a decimal when whole numbers would round it up to 100 %
    (99.6 % of the oracle bound is not the oracle bound)."""
    return f"{x:.0%}" if x < 0.995 else f"{x:.1%}"


def leaders(rows: Sequence[TableRow], metric: str) -> list[TableRow]:
    """The rows within :data:`TIE` of the highest ``metric``, in their order."""
    best = max(r[metric] for r in rows)
    return [r for r in rows if best - r[metric] < TIE]


def ties(rows: Sequence[TableRow], metric: str) -> list[list[TableRow]]:
    """Groups of two or more rows whose ``metric`` agree to three decimals (each group within
    :data:`TIE` of its first member, rows taken from the highest down)."""
    ordered = sorted(rows, key=lambda r: -r[metric])
    groups: list[list[TableRow]] = []
    for r in ordered:
        if groups and groups[-1][0][metric] - r[metric] < TIE:
            groups[-1].append(r)
        else:
            groups.append([r])
    return [g for g in groups if len(g) > 1]


def _verb(group: Sequence[TableRow], one: str, many: str) -> str:
    return one if len(group) == 1 else many


def bench_verdict(rows: Sequence[TableRow], top_k: int) -> list[str]:
    """What a policy table shows, sentence by sentence (markdown).

    ``rows`` are :func:`h2o.analysis.bench` rows (``label``, ``policy``, ``retained_mass``,
    ``top_k_recall``, ``oracle_mass``): who keeps the most mass and its share of the oracle bound;
    where random eviction stands (below whom, above whom); which other policies coincide; who
    leads on top-k recall when that is someone else.
    """
    if not rows:
        return []
    out = []
    oracle = float(rows[0]["oracle_mass"])
    top = leaders(rows, "retained_mass")
    m = max(float(r["retained_mass"]) for r in top)
    share = f", {percent(m / oracle)} of the oracle bound ({oracle:.3f})" if oracle > 0 else ""
    out.append(
        f"**{join([r['label'] for r in top])}** "
        f"{_verb(top, 'keeps', 'keep')} the most attention mass: {m:.3f}{share}."
        + (" They tie to three decimals." if len(top) > 1 else "")
    )
    rand = next((r for r in rows if r["policy"] == "random"), None)
    if rand is not None:
        rm = float(rand["retained_mass"])
        others = [r for r in rows if r is not rand]
        below = [r for r in others if r["retained_mass"] < rm - TIE]
        level = [r for r in others if abs(r["retained_mass"] - rm) < TIE]
        if below:
            who = join([f"{r['label']} ({r['retained_mass']:.3f})" for r in below])
            out.append(
                f"Random eviction keeps {rm:.3f}, and {who} "
                f"{_verb(below, 'keeps', 'keep')} *less*: at this setting random is no floor."
            )
        elif level:
            out.append(
                f"Random eviction keeps {rm:.3f}, level with "
                f"{join([r['label'] for r in level])}; every other policy keeps more."
            )
        else:
            out.append(f"Random eviction keeps {rm:.3f}, the least: every other policy beats it.")
    for group in ties(rows, "retained_mass"):
        if group[0] in top:
            continue
        if rand is not None and rand in group:
            continue  # said above
        out.append(
            f"{join([r['label'] for r in group])} coincide at {group[0]['retained_mass']:.3f}."
        )
    rtop = leaders(rows, "top_k_recall")
    if {id(r) for r in rtop} != {id(r) for r in top}:
        out.append(
            f"On top-{top_k} recall the lead is {join([r['label'] for r in rtop])}'s: "
            f"{max(r['top_k_recall'] for r in rtop):.3f}."
        )
    return out


def window_headline(
    rows: Sequence[TableRow],
    band: int,
    ref_mass: float,
    ref_recall: float,
    ref_label: str,
    top_k: int,
) -> str:
    """The recentWindow explorer's headline (markdown), from H2O's sweep ``rows`` (one per
    ``recent_window``, ascending, windows 32 and ``band`` among them) and the reference policy's
    mass and recall: below or above the reference at 32; at the band, on which metrics it beats
    the reference; past the band, whether a wider window still gains, holds or loses."""
    by_w = {r["recent_window"]: r for r in rows}
    at32, atband = by_w[32], by_w[band]
    m32, mb, rb = at32["retained_mass"], atband["retained_mass"], atband["top_k_recall"]
    out = [
        f"**At 32** H2O retains {m32:.4f} of the attention mass — "
        f"{'less' if m32 < ref_mass else 'more'} than {ref_label}'s {ref_mass:.4f}."
    ]
    wins = [name for name, ok in (("mass", mb > ref_mass), ("recall", rb > ref_recall)) if ok]
    versus = {
        2: f"above {ref_label} on both metrics",
        1: f"above {ref_label} on {wins[0] if wins else ''} only",
        0: f"below {ref_label} on both metrics",
    }[len(wins)]
    out.append(
        f"**At {band}** (the band) it retains {mb:.4f} with top-{top_k} recall {rb:.4f}: {versus}."
    )
    after = [r for r in rows if r["recent_window"] > band]
    if after:
        hi = max(after, key=lambda r: r["retained_mass"])
        lo = min(after, key=lambda r: r["retained_mass"])
        last = after[-1]["recent_window"]
        if hi["retained_mass"] - mb >= TIE:
            out.append(
                f"**Past {band}** the mass still rises, to {hi['retained_mass']:.4f} at "
                f"{hi['recent_window']}: on this trace the gain does not stop at the band width."
            )
        elif mb - lo["retained_mass"] >= TIE:
            out.append(
                f"**Past {band}** no window keeps more, and wider ones keep less (down to "
                f"{lo['retained_mass']:.4f} at {lo['recent_window']}): the gain stops at the band "
                "width, and a window that eats the budget takes slots from the heavy hitters."
            )
        else:
            out.append(
                f"**From {band} to {last}** the mass stays within {TIE} of {mb:.4f}: the gain "
                "stops at the band width."
            )
    return " ".join(out)
