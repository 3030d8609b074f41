"""The frontier's points: each row's KV bytes per token against its perplexity (from
``frontier.jsonl``) or its needle accuracy (from ``needle-grid.jsonl``), grouped into families.

A row belongs to one of five groups: the full cache (the reference), eviction (a policy or
SnapKV at a budget, full precision), KIVI-style quantization (every token kept, at fewer bits),
the two combined (eviction at a budget, the kept tokens quantized) and selection (every token
kept, a part of them read at each step: Quest).

Perplexity levels differ from text to text, so a row's perplexity is put against the full cache's
on the same text (its perplexity over the full cache's, less one: +5 % reads the text 5 % worse),
and a point is the mean of that over every text the file holds at :data:`PPL_TOKENS` tokens, its
range (lowest to highest) the spread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from app.needle.grid import family_name, row_order
from h2o.needle.results import Cell, FrontierRow, RowColumns, derived, parsed
from h2o.stats import MIN_POSITIONS

GROUPS = {
    "evict": "eviction",
    "compress": "KIVI-style quantization",
    "both": "eviction + KIVI-style",
    "select": "selection (every key held, a part read)",
}
#: The length the perplexity chart reads (``python -m h2o frontier``'s, the shipped runs'); every
#: text the file holds at it is on the chart.
PPL_TOKENS = 2048


def group(row: str, kind: str, bits: int | None) -> str:
    """``"full"``, ``"evict"``, ``"compress"``, ``"both"`` or ``"select"``: the row's kind says
    (:attr:`h2o.model.rows.Row.group`; a 16-bit KIVI-style cache is the full cache). A row this
    server cannot read (a policy it does not know) is grouped by the file's kind and bits."""
    known = parsed(row)
    if known is not None:
        return known.group
    if kind == "full" or (kind == "kivi" and bits == 16):
        return "full"
    if kind == "kivi":
        return "compress"
    return "both" if bits is not None else "evict"


@dataclass(frozen=True)
class Point:
    """One row on the frontier: ``x`` KV bytes per token, ``y`` the metric, over ``n`` cells
    (1 for a perplexity)."""

    row: str
    family: str
    group: str
    policy: str | None
    bits: int | None
    sinks: int
    x: float
    y: float
    n: int = 1
    right: int = 0  # accuracy points: the cells answered right
    order: tuple = ()
    #: accuracy points: ((depth, needle), answered right) per cell, for the paired test
    outcomes: tuple = ()
    #: accuracy points: the distinct needles of its thinnest depth (0 for a perplexity)
    needles: int = 0
    #: accuracy points: its positions (depths) at the length, each one observation
    positions: int = 0
    #: perplexity points: (text, perplexity, relative) per text it was measured on, ``relative``
    #: its perplexity over the full cache's on that text, less one (``y`` is their mean)
    texts: tuple[tuple[str, float, float], ...] = ()

    @classmethod
    def of(cls, first: RowColumns, **measures: object) -> Point:
        """A point for ``first``'s row (its name, family, group, policy, bits, sinks and order
        read from its columns) with the given measures (``x``, ``y``, ``n``, ...)."""
        return cls(
            row=first.row,
            family=family_name(first.family, first.allocation, first.row),
            group=group(first.row, first.kind, first.bits),
            policy=first.policy,
            bits=first.bits,
            sinks=first.sinks,
            order=row_order(first),
            **measures,
        )

    @property
    def spread(self) -> tuple[float, float]:
        """A perplexity point's lowest and highest relative perplexity over its texts."""
        rel = [r for _, _, r in self.texts] or [self.y]
        return min(rel), max(rel)


class PplTexts(NamedTuple):
    """The texts the frontier file holds at a length: those with a full-cache row (each row is
    put against it), and, for those without one yet, how many rows each holds."""

    texts: tuple[str, ...]
    unreferenced: tuple[tuple[str, int], ...]


def ppl_texts(rows: Sequence[FrontierRow], tokens: int = PPL_TOKENS) -> PplTexts:
    """The file's texts at ``tokens`` tokens, by name: those with a full-cache row, and the
    others with their number of rows. Computed once per server for a shipped file's records."""
    return derived(rows, ("ppl_texts", tokens), lambda: _ppl_texts(rows, tokens))


def _ppl_texts(rows: Sequence[FrontierRow], tokens: int) -> PplTexts:
    counts: dict[str, int] = {}
    referenced: set[str] = set()
    for r in rows:
        if r.tokens == tokens:
            counts[r.text] = counts.get(r.text, 0) + 1
            if group(r.row, r.kind, r.bits) == "full":
                referenced.add(r.text)
    return PplTexts(
        tuple(sorted(referenced)),
        tuple((t, n) for t, n in sorted(counts.items()) if t not in referenced),
    )


def ppl_points(rows: Sequence[FrontierRow], tokens: int = PPL_TOKENS) -> list[Point]:
    """The frontier rows at ``tokens`` tokens, one point a row over every text that has a
    full-cache row (:func:`ppl_texts`): ``y`` the mean over its texts of its perplexity over the
    full cache's on the same text, less one; ``n`` its number of texts. Computed once per server
    for a shipped file's records."""
    return list(derived(rows, ("ppl_points", tokens), lambda: _ppl_points(rows, tokens)))


def _ppl_points(rows: Sequence[FrontierRow], tokens: int) -> list[Point]:
    texts = set(ppl_texts(rows, tokens).texts)
    mine = [r for r in rows if r.tokens == tokens and r.text in texts]
    reference: dict[str, FrontierRow] = {}  # per text, its full cache: the first in row order
    for r in sorted(mine, key=row_order):
        if group(r.row, r.kind, r.bits) == "full":
            reference.setdefault(r.text, r)
    by_row: dict[str, list[FrontierRow]] = {}
    for r in mine:
        by_row.setdefault(r.row, []).append(r)
    out = []
    for rs in by_row.values():
        rs.sort(key=lambda r: r.text)
        per_text = tuple(
            (r.text, r.perplexity, r.perplexity / reference[r.text].perplexity - 1) for r in rs
        )
        out.append(
            Point.of(
                rs[0],
                x=sum(r.kv_bytes_per_token for r in rs) / len(rs),
                y=sum(rel for *_, rel in per_text) / len(per_text),
                n=len(rs),
                texts=per_text,
            )
        )
    return out


def accuracy_points(cells: Iterable[Cell], length: int) -> list[Point]:
    """Per row, its cells at ``length``: share answered right, mean KV bytes per token of the
    prompt (:attr:`Cell.tokens`). Computed once per server for a shipped file's records."""
    points = derived(cells, ("accuracy_points", length), lambda: _accuracy_points(cells, length))
    return list(points)


def _accuracy_points(cells: Iterable[Cell], length: int) -> list[Point]:
    by: dict[str, list[Cell]] = {}
    for c in cells:
        if c.length == length:
            by.setdefault(c.row, []).append(c)
    out = []
    for cs in by.values():
        right = sum(c.correct for c in cs)
        per_depth: dict[int, set[str]] = {}
        for c in cs:
            per_depth.setdefault(c.depth, set()).add(c.needle)
        out.append(
            Point.of(
                cs[0],
                x=sum(c.kv_bytes / c.tokens for c in cs) / len(cs),
                y=right / len(cs),
                n=len(cs),
                right=right,
                outcomes=tuple(((c.depth, c.needle), bool(c.correct)) for c in cs),
                needles=min(len(v) for v in per_depth.values()),
                positions=len(per_depth),
            )
        )
    return out


def full_of(points: Iterable[Point]) -> tuple[float, float] | None:
    """The full cache's point (``x``, ``y``): the chart's reference line; None if there is none."""
    return next(((p.x, p.y) for p in points if p.group == "full"), None)


def compared(points: Sequence[Point]) -> tuple[list[Point], list[Point]]:
    """Points split into those a verdict may compare and those it sets aside: the full cache
    is always compared; a needle accuracy with at least :data:`h2o.stats.MIN_POSITIONS`
    positions (depths) at the length (the position is the unit: its needles move together, one
    observation); a perplexity measured on every text the chart holds (a mean over fewer texts is
    not the same measurement)."""
    most = max((len(p.texts) for p in points), default=0)
    keep: list[Point] = []
    aside: list[Point] = []
    for p in points:
        enough = len(p.texts) == most if p.texts else p.positions >= MIN_POSITIONS
        (keep if p.group == "full" or enough else aside).append(p)
    return keep, aside


#: Two rows hold "equal memory" when their bytes per token differ by at most this share of the
#: memory asked about; a verdict compares only such rows.
TOLERANCE = 0.02


def at_memory(points: Iterable[Point], memory: float) -> list[Point]:
    """The rows (not the full cache) whose bytes per token lie within :data:`TOLERANCE` of
    ``memory``."""
    return [p for p in points if p.group != "full" and abs(p.x - memory) <= TOLERANCE * memory]


def lines(points: Iterable[Point]) -> dict[str, list[Point]]:
    """Family → its points by bytes per token (one line each), families in row order; the full
    cache is not a line (the figures draw it as the reference)."""
    by: dict[str, list[Point]] = {}
    for p in sorted(points, key=lambda p: p.order):
        if p.group != "full":
            by.setdefault(p.family, []).append(p)
    return {f: sorted(ps, key=lambda p: (p.x, p.row)) for f, ps in by.items()}


def cache_facts(point: Point) -> tuple[str | None, str | None, int]:
    """What the frontier's line style shows of a row, read from its label in the library's row
    grammar (never from the family's display name): the method that chooses what the cache
    keeps or reads (a policy, ``"snapkv"``, ``"quest"``; None for a quantized cache alone), its
    allocation and its fp16 sinks."""
    row = parsed(point.row)
    if row is None:  # a policy this server does not know: what the file says of it
        return point.policy, None, point.sinks
    method = row.policy if row.policy is not None or row.group != "select" else row.kind
    return method, row.allocation, row.sinks


class FigureLine(NamedTuple):
    """One family's points as the frontier figure draws them, with what its style shows."""

    family: str
    group: str
    method: str | None
    bits: int | None
    allocation: str | None
    sinks: int
    xs: list[float]
    ys: list[float]
    hover: list[str]
    #: perplexity lines: each point's lowest and highest value over its texts (its bar)
    spread: tuple[list[float], list[float]] | None = None


def figure_lines(points: Iterable[Point], value: Callable[[Point], str]) -> list[FigureLine]:
    """:func:`lines` as the frontier figure takes them, one :class:`FigureLine` per family
    (:func:`cache_facts` of its first row), each point's hover ``"<row>: <value(point)>"``; a
    perplexity line carries its points' ranges over texts (:attr:`Point.spread`)."""
    out = []
    for fam, ps in lines(points).items():
        method, allocation, sinks = cache_facts(ps[0])
        xs, ys = [p.x for p in ps], [p.y for p in ps]
        hover = [f"{p.row}: {value(p)}" for p in ps]
        spread = None
        if any(p.texts for p in ps):
            spread = ([p.spread[0] for p in ps], [p.spread[1] for p in ps])
        out.append(
            FigureLine(
                fam, ps[0].group, method, ps[0].bits, allocation, sinks, xs, ys, hover, spread
            )
        )
    return out


#: The groups whose rows hold every key: no memory to ask about.
WHOLE_CACHE = ("full", "select")


def memory_choices(points: Sequence[Point]) -> list[int]:
    """The memories a reader can ask about: the bytes per token, rounded, of every row that
    holds less than the whole cache (not the full cache, and not a selection such as Quest,
    which holds all of it and its page bounds besides)."""
    return sorted({round(p.x) for p in points if p.group not in WHOLE_CACHE})


#: The row of the 4-bit KIVI-style cache as the paper runs it (group 32, residual 128).
PAPER_4BIT = "kivi4"


def reference_rows(*point_sets: Sequence[Point]) -> list[str]:
    """The rows whose memory a reader can ask about, over every chart's points: each row that
    holds less than the whole cache, by its bytes per token on the first chart that has it."""
    seen: dict[str, float] = {}
    for points in point_sets:
        for p in points:
            if p.group not in WHOLE_CACHE:
                seen.setdefault(p.row, p.x)
    return sorted(seen, key=lambda r: (seen[r], r))


def memory_of(points: Sequence[Point], row: str) -> int | None:
    """``row``'s bytes per token on this chart, rounded (None when the chart has no such row):
    each chart counts a row's bytes over its own tokens, so "the memory of kivi4" is kivi4's
    own bytes on each."""
    return next((round(p.x) for p in points if p.row == row), None)


def default_memory(points: Sequence[Point]) -> int | None:
    """The memory the lesson asks about: the paper's 4-bit KIVI-style cache's (its "4× the
    tokens at 4 bits"), else another 4-bit one's, else the middle choice; None without any."""
    choices = memory_choices(points)
    paper = [p for p in points if p.row == PAPER_4BIT]
    if paper:
        return round(paper[0].x)
    four = [p for p in points if p.group == "compress" and p.bits == 4 and p.sinks == 0]
    if four:
        return round(min(four, key=lambda p: p.x).x)
    return choices[len(choices) // 2] if choices else None
