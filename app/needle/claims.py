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

from app.needle import frontier
from app.needle.frontier import GROUPS, Point
from app.needle.grid import RowScore
from app.needle.grid import rows as grid_rows
from app.real_model.claims import esc, names
from h2o.needle.results import Cell, FollowUpCell, FrontierRow, derived, parsed
from h2o.stats import (
    ALPHA,
    MIN_POSITIONS,
    Paired,
    min_p,
    not_compared,
    p_text,
    paired,
    positions,
    sign_test,
)

#: The share of cells the full cache should answer at ≤ :data:`FULL_MAX_LENGTH` tokens (what the
#: needle prompt's format aims for; the page says so when the full cache falls short of it).
FULL_TARGET, FULL_MAX_LENGTH = 0.9, 2048


@dataclass(frozen=True)
class Metric:
    """What the y axis measures: perplexity (lower is better) or needle accuracy."""

    name: str
    lower_better: bool

    def value(self, p: Point) -> str:
        if self.lower_better:
            return ppl_value(p)
        return f"{positions(dict(p.outcomes)).text()} answered"


def pct(v: float) -> str:
    """A relative perplexity, signed: ``+4.9%`` (``+0.0%``, never ``-0.0%``)."""
    return f"{0.0 if abs(v) < 0.0005 else v:+.1%}"


def ppl_value(p: Point) -> str:
    """A perplexity point's value in % over the full cache's on the same texts (the verdict's
    head says so), with how many texts and their range: ``+4.9% (mean of 3 texts, range +3.1%
    to +6.0%)``; on one text the value alone."""
    if len(p.texts) == 1:  # the verdict's head names the text
        return pct(p.y)
    lo, hi = p.spread
    return f"{pct(p.y)} (mean of {len(p.texts)} texts, range {pct(lo)} to {pct(hi)})"


def ppl_hover(p: Point) -> str:
    """A perplexity point's hover (plain text: the figure escapes it): its value against the
    full cache's and its perplexity on each text."""
    each = ", ".join(f"{t} {v:.2f}" for t, v, _ in p.texts)
    if len(p.texts) == 1:
        return f"{pct(p.y)} over the full cache's on {each}"
    lo, hi = p.spread
    return (
        f"{pct(p.y)} over the full cache's, mean of {len(p.texts)} texts ({pct(lo)} to "
        f"{pct(hi)}); perplexity {each}"
    )


def bar_legend(texts: Sequence[str]) -> str | None:
    """What a perplexity point's bar is, for the chart's legend (None on one text: no bar)."""
    if len(texts) < 2:
        return None
    return f"bar: range over {len(texts)} texts"  # short: a legend entry is a column's width


def full_ppl(p: Point) -> str:
    """The full cache's own perplexity on each text: ``22.00 on lighthouse.txt and 25.31 on
    library.txt``."""
    return names([f"{v:.2f} on {esc(t)}" for t, v, _ in p.texts])


PERPLEXITY = Metric("perplexity", lower_better=True)
ACCURACY = Metric("needle accuracy", lower_better=False)


def label(p: Point) -> str:
    """``H2O (h2o@256)``: the family and the row, escaped."""
    return esc(p.family) if p.family == p.row else f"{esc(p.family)} ({esc(p.row)})"


def _key(metric: Metric):
    return lambda p: (p.y if metric.lower_better else -p.y, p.x, p.row)


def best(points: Iterable[Point], memory: float, metric: Metric) -> dict[str, Point]:
    """Group → its best row at ``memory`` (within :data:`frontier.TOLERANCE`; ties: fewer bytes,
    then the label)."""
    out: dict[str, Point] = {}
    for p in sorted(frontier.at_memory(points, memory), key=_key(metric)):
        out.setdefault(p.group, p)
    return out


def _nearest(mine: Sequence[Point], memory: float, name: str) -> str:
    near = min(mine, key=lambda p: (abs(p.x - memory), p.x, p.row))
    gap = (near.x - memory) / memory
    side = "more" if gap > 0 else "less"
    return (
        f"no {name} row holds within {frontier.TOLERANCE:.0%} of it (the nearest, {label(near)}, "
        f"holds {near.x:,.0f}: {abs(gap):.0%} {side})"
    )


def compare(win: Point, other: Point) -> Paired:
    """The exact sign test of two accuracy points over the positions (depths, at the point's
    length) they share."""
    return paired(dict(win.outcomes), dict(other.outcomes))


def _accuracy_said(win: Point, others: Sequence[tuple[str, Point]]) -> str:
    more, same, fewer, thin = [], [], [], []
    for name, b in others:
        t = compare(win, b)
        if t.n < MIN_POSITIONS:  # each has enough positions, but they share too few
            thin.append((t.n, f"the best {name} row"))
            continue
        said = (
            f"the best {name} row ({t.right_a} against {t.right_b} of {t.needles} shared "
            f"needles at {t.n} positions, {t.counts()}, exact sign test {p_text(t.p)})"
        )
        if not t.differs:
            same.append((t.n, said))
        else:  # on the positions both have, the test may favour either (their cells differ)
            (more if t.more_a > t.more_b else fewer).append(said)
    text = ""
    if more:
        text += f" {label(win)} answers more needles than {names(more)}."
    if fewer:
        text += (
            f" On their shared positions, {label(win)} answers fewer needles than {names(fewer)}."
        )
    if same:  # every test here is on at least MIN_POSITIONS positions: each could decide
        lead = "It" if more or fewer else label(win)
        n = sorted({n for n, _ in same})
        text += (
            f" {lead} is not distinguishable with n = {names([str(x) for x in n])} positions "
            f"from {names([said for _, said in same])}."
        )
    for n in sorted({n for n, _ in thin}):
        who = names([w for k, w in thin if k == n])
        text += f" {label(win)} and {who}: {not_compared(n, 'shared positions')}."
    return text


def verdict(points: Sequence[Point], memory: int, metric: Metric) -> str:
    """The equal-memory answer at ``memory`` bytes per token: each group's best row within
    :data:`frontier.TOLERANCE` of it (a group with none says so, and names its nearest row), and
    how they compare — for accuracy by an exact sign test over their shared positions (the
    depths: one length), a difference said only at p < 0.05, among rows with at least
    :data:`h2o.stats.MIN_POSITIONS` positions that share that many; for perplexity by the mean
    over texts of each row's perplexity against the full cache's on the same text, and on how
    many of their texts the best row's perplexity is the lower, among rows measured on every
    text of the chart.
    Rows near ``memory`` set aside (:func:`frontier.compared`) are named as not compared."""
    points, aside = frontier.compared(points)
    none = "the file has no row but the full cache to compare yet"
    if aside and not metric.lower_better and all(p.group == "full" for p in points):
        none = f"no row at this length has the {MIN_POSITIONS} positions a comparison needs"
    text = _verdict(points, memory, metric, none)
    near = frontier.at_memory(aside, memory)
    if near:
        if metric.lower_better:
            named = names([label(p) for p in sorted(near, key=lambda p: p.order)])
            most = max(len(p.texts) for p in points)
            text += (
                f" Not compared: {named} (measured on fewer than the {most} texts: drawn, not "
                "ranked)."
            )
        else:
            by_n: dict[int, list[str]] = {}
            for p in sorted(near, key=lambda p: p.order):
                by_n.setdefault(p.positions, []).append(label(p))
            text += (
                " Not compared, drawn but not ranked: "
                + "; ".join(
                    f"{names(rows)} ({_count(n, 'position')} at this length, fewer than "
                    f"{MIN_POSITIONS})"
                    for n, rows in sorted(by_n.items())
                )
                + "."
            )
    return text


def _verdict(points: Sequence[Point], memory: int, metric: Metric, none: str) -> str:
    full = min((p for p in points if p.group == "full"), key=lambda p: p.order, default=None)
    head = f"At {memory:,} KV bytes per token (± {frontier.TOLERANCE:.0%})"
    if full is not None and metric.lower_better and full.texts:
        on = f"({full_ppl(full)})" if len(full.texts) == 1 else "on the same text"
        head += (
            f", {memory / full.x:.0%} of the full cache's {full.x:,.0f}; perplexity in % over "
            f"the full cache's {on}"
        )
    elif full is not None:
        head += (
            f", {memory / full.x:.0%} of the full cache's {full.x:,.0f} (which has "
            f"{metric.value(full)})"
        )
    bests = best(points, memory, metric)
    parts = []
    for g, name in GROUPS.items():
        mine = [p for p in points if p.group == g]
        if g in bests:
            b = bests[g]
            said = f"{metric.value(b)} at {b.x:,.0f} bytes per token"
            parts.append(f"the best {name} row is {label(b)}, {said}")
        elif mine:
            parts.append(_nearest(mine, memory, name))
    if not parts:
        return f"{head}: {none}."
    text = f"{head}: {'; '.join(parts)}."
    if not bests:
        return text
    if len(bests) == 1:
        (g,) = bests
        return f"{text} Only {GROUPS[g]} has a row at this memory: nothing to compare it with."
    ranked = sorted(bests.items(), key=lambda kv: _key(metric)(kv[1]))
    win, rest = ranked[0][1], ranked[1:]
    if metric.lower_better:
        return text + _ppl_said(win, [(GROUPS[g], b) for g, b in rest])
    return text + _accuracy_said(win, [(GROUPS[g], b) for g, b in rest])


def _ppl_said(win: Point, others: Sequence[tuple[str, Point]]) -> str:
    """The best row against each other group's best, text by text: on how many of the texts
    both were measured on its perplexity is the lower, and what a sign test over so few
    texts can say."""
    mine = {t: v for t, v, _ in win.texts}
    said, shared = [], set()
    for name, b in others:
        theirs = {t: v for t, v, _ in b.texts if t in mine}
        shared.add(len(theirs))
        lower = sum(mine[t] < v for t, v in theirs.items())
        higher = sum(mine[t] > v for t, v in theirs.items())
        equal = len(theirs) - lower - higher
        extra = [f"higher on {higher}" if higher else "", f"equal on {equal}" if equal else ""]
        extra = [e for e in extra if e]
        said.append(
            f"lower than the best {name} row's on {lower} of {len(theirs)} "
            f"{'text' if len(theirs) == 1 else 'texts'}"
            + (f" ({', '.join(extra)})" if extra else "")
            + (
                f", exact sign test {p_text(sign_test(lower, higher))}"
                if min_p(len(theirs)) < ALPHA
                else ""
            )
        )
    mean = "mean " if len(win.texts) > 1 else ""
    text = f" The lowest {mean}here is {label(win)}'s: {names(said)}"
    few = sorted(n for n in shared if min_p(n) >= ALPHA)
    if few:
        text += (
            f"; {names([str(n) for n in few], 'or')} {'text' if few == [1] else 'texts'}: too "
            "few for a sign test"
        )
    return text + "."


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


def scores_sentence(scores: Sequence[RowScore], cells: Sequence[Cell]) -> str:
    """Per row: needles answered over its positions (each a length and depth) with the 95 %
    interval over positions, and mean log-prob; then the most against the least accurate row,
    said to differ only when an exact sign test over their shared positions (``cells``: the
    cells shown) gives p < 0.05, and compared only on at least
    :data:`h2o.stats.MIN_POSITIONS` of them."""
    if not scores:
        return ""
    mine: dict[str, dict] = {s.row: {} for s in scores}
    for c in cells:
        if c.row in mine:
            mine[c.row][(c.length, c.depth, c.needle)] = bool(c.correct)
    parts = [
        f"{esc(s.row)}: {positions(mine[s.row]).text()} answered, mean log-prob "
        f"{s.mean_logprob:.2f}"
        for s in scores
        if mine[s.row]
    ]
    text = "Row by row — " + "; ".join(parts) + "."
    accs = [s.accuracy for s in scores]
    if len(scores) > 1 and max(accs) > min(accs):
        top = min((s for s in scores if s.accuracy == max(accs)), key=lambda s: s.cells)
        low = min((s for s in scores if s.accuracy == min(accs)), key=lambda s: s.cells)
        try:
            t = paired(mine[top.row], mine[low.row])
        except ValueError:
            return text + f" {esc(top.row)} and {esc(low.row)} share no cell to compare."
        pair = f"{esc(top.row)} against {esc(low.row)}"
        if t.n < MIN_POSITIONS:
            return text + (
                f" The most and the least accurate rows ({pair}: {t.right_a} against "
                f"{t.right_b} of {t.needles} shared needles): "
                f"{not_compared(t.n, 'shared positions')}."
            )
        said = (
            f"{t.right_a} against {t.right_b} of {t.needles} shared needles at {t.n} positions, "
            f"{t.counts()}, exact sign test {p_text(t.p)}"
        )
        if t.differs and t.more_a > t.more_b:
            text += f" The most accurate row answers more than the least ({pair}: {said})."
        elif t.differs:  # on their shared positions the test may favour the other
            text += (
                f" On their shared positions the least accurate row answers more ({pair}: {said})."
            )
        else:
            text += f" Even the most and the least accurate rows: {t.undecided()} ({pair}: {said})."
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
        s = positions({(c.length, c.depth, c.needle): c.correct for c in short})
        text += f"{s.text()} at ≤ {FULL_MAX_LENGTH:,} tokens"
        if s.value < FULL_TARGET:
            text += f", short of the {FULL_TARGET:.0%} its prompt format aims for"
    longer = sorted({c.length for c in full if c.length > FULL_MAX_LENGTH})
    for n in longer:
        cs = {(c.length, c.depth, c.needle): c.correct for c in full if c.length == n}
        text += ("; at " if short else "at ") + f"{n:,} tokens {positions(cs).text()}"
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


# -- the second question ---------------------------------------------------------------------------
def followup_sentences(cells: Sequence[FollowUpCell], rows: Sequence[str]) -> list[str]:
    """Per row of ``rows`` (in that order; those with cells): the first and the second question
    answered over the row's positions (a position: the length and the two facts' depths), each
    with its 95 % interval over positions, and whether the second is answered less — an exact
    sign test over the positions (each cell asks both), said only at p < 0.05 and made only on
    at least :data:`h2o.stats.MIN_POSITIONS` positions."""
    out = []
    for r in rows:
        cs = [c for c in cells if c.row == r]
        if not cs:
            continue
        first = {c.key: c.correct_first for c in cs}
        second = {c.key: c.correct_second for c in cs}
        t = paired(first, second, followup_position)
        said = (
            f"**{esc(r)}**: the first question {positions(first, followup_position).text()}, the "
            f"second {positions(second, followup_position).text()}"
        )
        test = f"{t.counts()}; {p_text(t.p)}"
        if t.n < MIN_POSITIONS:
            said += f" — {t.counts()}: {not_compared(t.n)}"
        elif t.differs:
            more = "fewer" if t.more_a > t.more_b else "more"
            said += f" — the second answered {more} ({test})"
        elif t.right_a == t.right_b:
            said += f" — the same count ({test})"
        else:
            said += f" — {t.undecided()} ({test})"
        out.append(said + ".")
    return out


def followup_position(key: tuple) -> tuple:
    """A follow-up cell's position (:attr:`FollowUpCell.key` without its facts): the length and
    the two facts' depths."""
    return key[:3]


def followup_summary(cells: Sequence[FollowUpCell], rows: Sequence[str]) -> str:
    """The cells where a row answered the first question and missed the second, counted per
    row (rows with none named together)."""
    some, none = [], []
    for r in rows:
        cs = [c for c in cells if c.row == r]
        if not cs:
            continue
        lost = sum(c.correct_first and not c.correct_second for c in cs)
        if lost:
            some.append(f"{esc(r)} in {lost} of {len(cs)}")
        else:
            none.append(esc(r))
    if not some and not none:
        return "The file has no follow-up cell for these rows yet."
    text = "Answered the first question and missed the second: "
    text += names(some) if some else "no row, in any cell"
    if some and none:
        text += f"; {names(none)} in none"
    return text + "."


def modes_sentence(cells: Sequence[Cell], decode: str, prefill: str) -> str:
    """H2O's two modes on the cells both rows have: how many each answers over its positions
    (with its interval), where (the depths), and what the exact sign test over the positions
    says (on at least :data:`h2o.stats.MIN_POSITIONS` of them; else not compared)."""
    a = {(c.length, c.depth, c.needle): c for c in cells if c.row == prefill}
    b = {(c.length, c.depth, c.needle): c for c in cells if c.row == decode}
    shared = [k for k in a if k in b]
    if not shared:
        return ""
    oa = {k: a[k].correct for k in shared}
    ob = {k: b[k].correct for k in shared}
    t = paired(oa, ob)
    deps = sorted({k[1] for k in shared if a[k].correct or b[k].correct})
    where = (
        f"only at depth {names([f'{d} %' for d in deps])}"
        if deps and len(deps) < len({k[1] for k in shared})
        else ("at no depth" if not deps else "at every depth")
    )
    text = (
        f"On the same {t.n} positions, H2O in its prefill mode ({esc(prefill)}) answers "
        f"{positions(oa).text()} and evicting while it reads ({esc(decode)}) "
        f"{positions(ob).text()}, right {where}"
    )
    if t.n < MIN_POSITIONS:
        return text + f": {not_compared(t.n)}."
    if t.differs:
        more = "the prefill mode" if t.more_a > t.more_b else "evicting while reading"
        return text + f": {more} answers more (exact sign test {p_text(t.p)})."
    return text + f": {t.undecided()} (exact sign test {p_text(t.p)})."


def band_sentence(band: Sequence[int], warmup: int, window: int | None = None) -> str:
    """The model's local attention band (``attention-band.json``): its spread over the layers,
    and how many layers a recent window of ``window`` covers."""
    b = np.asarray(band, dtype=np.int64)
    if b.size == 0:
        return ""
    capped = int((b > warmup).sum())
    text = (
        f"How far back does SmolLM2 look? Half of each layer's attention outside the sinks "
        f"falls within its most recent {int(b.min())} to "
        f"{'more than ' + f'{warmup:,}' if capped else f'{int(b.max()):,}'} tokens (median "
        f"{np.median(b):g}, over {b.size} layers)"
    )
    if window is not None:
        text += f"; a recent window of {window} covers that band in {int((b <= window).sum())}"
        text += f" of the {b.size} layers"
    return text + "."


def window_sweep_sentence(cells: Sequence[Cell], rows: Sequence[str], length: int) -> str:
    """The card's check of H2O's recent window, from the sweep's cells (``rows``: H2O at
    several budgets and windows, evicting while it reads, at ``length`` tokens): the most any
    setting answers, and where each answered needle was when the question came — wholly inside
    the recent window (the last ``window`` prompt tokens), partly, or outside it."""
    from h2o.model.rows import Row

    by_row: dict[str, list[Cell]] = {}
    for c in cells:
        if c.row in rows and c.length == length:
            by_row.setdefault(c.row, []).append(c)
    if not by_row:
        return ""
    best = max(by_row, key=lambda r: (sum(c.correct for c in by_row[r]), -len(by_row[r])))
    where = {"inside": 0, "partly": 0, "outside": 0, "unknown": 0}
    for r, cs in by_row.items():
        w = Row.parse(r).recent_window or 0
        for c in cs:
            if not c.correct:
                continue
            if c.needle_span is None:
                where["unknown"] += 1
            elif c.needle_span[0] >= c.tokens - w:
                where["inside"] += 1
            elif c.needle_span[1] > c.tokens - w:
                where["partly"] += 1
            else:
                where["outside"] += 1
    answered = sum(where.values())
    text = (
        f"The card's check, done: H2O evicting while it reads, at {length:,} tokens, in "
        f"{len(by_row)} settings of its budget and recent window. The most any setting answers "
        f"is {positions({(c.depth, c.needle): c.correct for c in by_row[best]}).text()} "
        f"({esc(best)})"
    )
    if not answered:
        return text + "."
    text += (
        f". Of the {answered} needles answered over all settings, {where['inside']} lay wholly "
        "inside the recent window when the question came"
    )
    if where["partly"]:
        text += f", {where['partly']} partly"
    if where["unknown"]:
        text += f", {where['unknown']} with no recorded span"
    if where["outside"]:
        return text + f", and {where['outside']} wholly outside it."
    return text + (
        ", none outside it: what H2O recalls here, its window kept, not its heavy hitters."
    )


def one_shot_note(cells: Sequence[Cell], on_chart: Iterable[str]) -> str:
    """The needle file's methods that have no point on the perplexity chart because their kind
    of cache compresses a prompt once (:attr:`~h2o.model.caches.CacheKind.closed_loop` false:
    SnapKV), named, with why ("" if none). ``on_chart``: the rows of the perplexity chart."""
    charted = {row.kind for r in on_chart if (row := parsed(r)) is not None}
    said: dict[str, str] = {}
    for r in grid_rows(cells):
        row = parsed(r)
        if row is None or row.cache.closed_loop or row.kind in charted:
            continue
        if row.kind not in said or (row.allocation is None and row.bits is None):
            said[row.kind] = row.cache.name()  # a plain row's name over an allocated one's
    if not said:
        return ""
    many = len(said) > 1
    verb, their, them, are = (
        ("compress", "their", "them", "they are") if many else ("compresses", "its", "it", "it is")
    )
    return (
        f"{names([esc(n) for n in said.values()])} {verb} a prompt once, after reading it, as "
        f"{their} authors run {them}: a perplexity over a text read one token at a time does not "
        f"apply, so {are} on the needle chart below only."
    )


def stepped_note(on_chart: Iterable[str]) -> str:
    """How the perplexity chart runs the methods whose authors compress a prompt once (a kind of
    :class:`~h2o.model.caches.base.ContextCompression` with a closed loop: K-norm, Expected
    Attention, KVzip): their decode-time policy, one eviction a token, named with what it knows
    ahead (:attr:`~h2o.policies.Policy.hindsight`) and what it holds besides its slots ("" if
    the chart has none). ``on_chart``: the chart's rows."""
    import h2o
    from h2o.model.caches.base import ContextCompression

    stepped: dict[str, type] = {}
    rank: dict[str, int] = {}
    for r in on_chart:
        row = parsed(r)
        if row is None or not row.cache.closed_loop:
            continue
        if not isinstance(row.cache, ContextCompression):
            continue
        stepped.setdefault(row.family, h2o.POLICIES[row.cache.decode_policy])
        rank.setdefault(row.family, row.cache.rank)
    if not stepped:
        return ""
    stepped = {f: stepped[f] for f in sorted(stepped, key=lambda f: rank[f])}  # the menus' order
    many = len(stepped) > 1
    windows = sorted({int(getattr(c, "default_recent_window", 0)) for c in stepped.values()})
    text = (
        f"{names([esc(n) for n in stepped])} {'compress' if many else 'compresses'} a prompt "
        f"once as {'their authors run them' if many else 'its authors run it'}; a text read one "
        "token at a time has no prompt to compress, so on this chart "
        f"{'each' if many else 'it'} evicts one position a token by the same score, in every "
        f"head with a recent window of {names([str(w) for w in windows], 'or')}. (kvpress "
        "runs a scorer press such as K-norm or Expected Attention while decoding with its "
        "DecodingPress, which cuts the whole cache back to a target size at an interval of "
        "steps and keeps no recent window.)"
    )
    for cls in dict.fromkeys(stepped.values()):
        # the class's own sentence, at its defaults: what the chart ran (fed_heads.fed_layers)
        if note := cls().score_note():
            text += f" {note}"
    for cls in dict.fromkeys(stepped.values()):
        if cls.hindsight:
            text += f" {cls.hindsight}: its line is a reference, not a decoder."
    held = [n for n, cls in stepped.items() if cls.state_bytes(2, 1)]  # any head size
    if held:
        text += (
            f" {names([esc(n) for n in held])} also {'hold' if len(held) > 1 else 'holds'} "
            "statistics of the queries read so far (a mean and a covariance a query head, "
            "float64), counted in the bytes."
        )
    return text


def read_note(records: Sequence[FrontierRow], on_chart: Iterable[str]) -> str:
    """For the chart's rows (at :data:`frontier.PPL_TOKENS` tokens, on the chart's texts:
    :func:`frontier.ppl_texts`) that read a part of what they hold (a selection: Quest), what
    each holds after a text and the share of the cache a step reads, on average over a text's
    steps and over the texts, from the file's own numbers, a family at a time ("" if the chart
    has none)."""
    charted = set(on_chart)
    texts = set(frontier.ppl_texts(records).texts)
    by_row: dict[str, list[FrontierRow]] = {}
    for r in records:
        if r.row not in charted or r.tokens != frontier.PPL_TOKENS or r.text not in texts:
            continue
        if r.read_share is None or r.read_share >= 1:
            continue
        by_row.setdefault(r.row, []).append(r)
    by_family: dict[str, list[tuple[FrontierRow, float, float, int]]] = {}
    for rs in by_row.values():  # a row: its bytes and share, each the mean over its texts
        held = sum(r.kv_bytes_per_token for r in rs) / len(rs)
        share = sum(r.read_share or 0.0 for r in rs) / len(rs)
        by_family.setdefault(rs[0].family, []).append((rs[0], held, share, len(rs)))
    said = []
    for fam, rs in by_family.items():
        rs.sort(key=lambda e: (e[0].budget is None, e[0].budget or 0, e[0].row))
        n = {k for *_, k in rs}
        over = (
            "on average over the text's steps"
            if n == {1}
            else f"on average over a text's steps and the {n.pop()} texts"
            if len(n) == 1
            else "on average over a text's steps and the texts each was measured on"
        )
        helds = {f"{held:,.0f}" for _, held, _, _ in rs}
        at = [
            f"{share:.0%} at {r.budget} slots ({esc(r.row)})"
            if r.budget is not None
            else f"{share:.0%} ({esc(r.row)})"
            for r, _, share, _ in rs
        ]
        if len(helds) == 1:
            said.append(
                f"{esc(fam)} holds {helds.pop()} bytes a token after the text, and a step reads "
                f"{names(at)} of what it holds then, {over}"
            )
        else:
            said += [
                f"{esc(fam)} ({esc(r.row)}) holds {held:,.0f} bytes a token after the text, and a "
                f"step reads {share:.0%} of what it holds then, {over}"
                for r, held, share, _ in rs
            ]
    if not said:
        return ""
    return (
        "A selection evicts nothing: it holds every key and reads a part of them at each step. "
        + "; ".join(said)
        + ". The chart places it by what it holds."
    )


def text_notes(records: Sequence[FrontierRow], on_chart: Sequence[str]) -> tuple[str, ...]:
    """The perplexity chart's notes on how its rows run over a text (:func:`stepped_note`,
    :func:`read_note`), those that say something; once per version of the file's records."""
    charted = tuple(on_chart)
    return derived(
        records,
        ("text notes", charted),
        lambda: tuple(n for n in (stepped_note(charted), read_note(records, charted)) if n),
    )


def _count(n: int, one: str, many: str = "") -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def texts_note(records: Sequence[FrontierRow], points: Sequence[Point]) -> str:
    """What the perplexity chart's points are over, from the file: its texts at
    :data:`frontier.PPL_TOKENS` tokens that have a full-cache row, what a point and its bar
    are, the rows measured on fewer of them (drawn, never ranked), and the texts with no
    full-cache row yet (not shown)."""
    texts, unreferenced = frontier.ppl_texts(records)
    tokens = f"{frontier.PPL_TOKENS:,} tokens"
    out = []
    full = min((p for p in points if p.group == "full"), key=lambda p: p.order, default=None)
    unit = (
        "in % over the full cache's on the same text (above 0%: read worse than by the full cache)"
    )
    if len(texts) == 1:
        out.append(
            f"Perplexity over {tokens} of one text, {esc(texts[0])}"
            + (f" (the full cache's: {full.texts[0][1]:.2f})" if full is not None else "")
            + f", each row's {unit}: one measurement a row, no range."
        )
    elif texts:
        which = (
            f"the full cache's perplexity: {full_ppl(full)}"
            if full is not None
            else names([esc(t) for t in texts])
        )
        out.append(
            f"Perplexity over {tokens} of {len(texts)} texts ({which}), each row's {unit}: a "
            f"point is the mean over the {len(texts)} texts, its bar their range, lowest to "
            "highest."
        )
        fewer = sorted((p for p in points if len(p.texts) < len(texts)), key=lambda p: p.order)
        if fewer:
            listed = [f"{esc(p.row)} on {len(p.texts)}" for p in fewer[:6]]
            more = f" and {len(fewer) - 6} more" if len(fewer) > 6 else ""
            out.append(
                f"{_count(len(fewer), 'row')} measured on fewer of them so far "
                f"({', '.join(listed)}{more}): drawn over the texts they have, never ranked."
            )
    elif not unreferenced:
        return f"The frontier file has no row at {tokens}."
    for t, n in unreferenced:
        out.append(
            f"{esc(t)}: {_count(n, 'row')} at {tokens} but no full-cache row to put "
            f"{'it' if n == 1 else 'them'} against yet: not shown."
        )
    return " ".join(out)


def ppl_counted(records: Sequence[FrontierRow], points: Sequence[Point]) -> str:
    """How many rows and families the perplexity chart draws, and the file's lines at another
    length it leaves out."""
    other = sum(r.tokens != frontier.PPL_TOKENS for r in records)
    families = len(frontier.lines(points))
    return (
        f"{_count(len(points), 'row')} in {_count(families, 'family', 'families')}"
        + (f"; {_count(other, 'line')} at another length not shown" if other else "")
        + "."
    )
