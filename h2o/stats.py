"""The statistics every comparison on screen rests on. The unit is the *position*, not the needle.

A needle cell is one question at one position of one haystack: a (text, length, depth), the
needle's key naming which fact sits there. The grid asks several facts at each position, and
they are not independent trials: whether a cache kept the tokens at that depth of that prompt
decides all of them together (H2O with half its budget a recent window answers exactly the
needles at depth 100 %, every one of them, and nothing else). Counting cells as trials would
take three needles at one position for three observations where there is one. So a row's
outcome at a position is how many of its needles it answered there, and every interval and
test here is over positions. A cell key is ``(*position, needle)``: everything but its last
element names the position (:func:`position_of`); the needle grid's ``(length, depth, needle)``
has one haystack text, so its positions are ``(length, depth)``.

* :func:`positions` — a row's share answered with a 95 % interval over positions. Each position
  counts as one trial whose success is the fraction of its needles answered; the share is the
  mean of those fractions and the interval is Wilson's score interval on ``n`` positions at that
  mean. Why that and not a cluster bootstrap: a fraction ``X`` in ``[0, 1]`` with mean ``p`` has
  ``Var X <= p (1 - p)``, so the binomial variance on ``n`` positions bounds the true one however
  the needles at a position move together — the interval can only be wider than it needs to be,
  and it is exactly the binomial one when they move all together (what the grid shows). A
  bootstrap over 5 to 30 positions, many of them all-wrong, collapses to a zero-width interval
  at 0 or 100 % and under-covers at these sizes; Wilson's keeps its coverage at small ``n``
  (Brown, Cai & DasGupta 2001). scipy's Wilson takes whole successes only, so the formula is
  written here (:func:`_wilson_fraction`); with whole successes it is scipy's (tested).
* :func:`paired` — two rows on the positions they share, by an exact sign test: at each shared
  position, which row answered more of the needles both were asked there; ties say nothing and
  are dropped; the positions A won are a two-sided binomial test against one half
  (:func:`scipy.stats.binomtest`). The pages say one row "answers more" than another only when
  that test gives ``p < ALPHA``.
* :func:`min_p` — the smallest p a sign test on ``n`` positions can give at all (every position
  won by one row). On 5 positions it is ``2 / 2**5 = 0.0625``: no data could pass ``ALPHA``, so
  the pages say no verdict is possible there rather than "not distinguishable"
  (:meth:`Paired.undecided`).

:func:`share` is the plain binomial share with its Wilson interval, for a count of independent
trials (and for the rows of tables that list raw counts).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass

from scipy.stats import binomtest, norm

#: Confidence of every interval shown, and the level a paired test must pass to call a difference.
CONFIDENCE = 0.95
ALPHA = 0.05
#: The fewest positions a comparison on the pages rests on. With fewer, a sign test can pass
#: :data:`ALPHA` only if (nearly) every position goes one way (on 5 it never can: ``2 / 2**5``);
#: on 10, nine won and one lost still pass. Rows with fewer are drawn and named as not compared.
MIN_POSITIONS = 10


def _count(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    return value


@dataclass(frozen=True)
class Share:
    """``right`` of ``n`` with its 95 % Wilson interval ``[low, high]``."""

    right: int
    n: int
    low: float
    high: float

    @property
    def value(self) -> float:
        return self.right / self.n

    def text(self) -> str:
        """``15 of 20 (75 %, 95 % CI 53–89 %)``."""
        return (
            f"{self.right} of {self.n} ({self.value:.0%}, 95 % CI "
            f"{self.low * 100:.0f}–{self.high * 100:.0f} %)"
        )


def share(right: int, n: int) -> Share:
    """``right`` successes of ``n`` with the Wilson score interval at :data:`CONFIDENCE`."""
    right, n = _count("right", right), _count("n", n)
    if n == 0:
        raise ValueError("a share needs at least one cell (n = 0)")
    if right > n:
        raise ValueError(f"right ({right}) cannot exceed n ({n})")
    return Share(right, n, *_wilson(right, n))


# Memoised: the pages ask for the same few hundred (right, n) pairs on every run of every student.
@functools.lru_cache(maxsize=4096)
def _wilson(right: int, n: int) -> tuple[float, float]:
    ci = binomtest(right, n).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return float(ci.low), float(ci.high)


# -- positions ------------------------------------------------------------------------------------
def position_of(key: Hashable) -> Hashable:
    """The position of a cell key ``(*position, needle)``: all but its last element."""
    if not isinstance(key, tuple) or len(key) < 2:
        raise ValueError(f"a cell key is (*position, needle), got {key!r}")
    return key[:-1]


Position = Callable[[Hashable], Hashable]


def by_position(
    cells: Mapping[Hashable, bool], position: Position = position_of
) -> dict[Hashable, tuple[int, int]]:
    """Position → (needles answered, needles asked), in the cells' order."""
    out: dict[Hashable, list[int]] = {}
    for k, ok in cells.items():
        x = out.setdefault(position(k), [0, 0])
        x[0] += bool(ok)
        x[1] += 1
    return {p: (r, n) for p, (r, n) in out.items()}


@dataclass(frozen=True)
class Positions:
    """A row's needles over positions: ``right`` of ``asked`` needles, at ``n`` positions of which
    ``hit`` have at least one answered; ``value`` the mean over positions of the share answered
    there, ``[low, high]`` its 95 % Wilson interval on ``n`` positions."""

    right: int
    asked: int
    n: int
    hit: int
    value: float
    low: float
    high: float

    def text(self) -> str:
        """``9 of 45 needles, at 3 of 15 positions (20 %; 95 % CI 7–45 % over positions)``."""
        needles = "needle" if self.asked == 1 else "needles"
        where = "position" if self.n == 1 else "positions"
        return (
            f"{self.right} of {self.asked} {needles}, at {self.hit} of {self.n} {where} "
            f"({self.value:.0%}; 95 % CI {self.low * 100:.0f}–{self.high * 100:.0f} % over "
            f"{where})"
        )


def positions(cells: Mapping[Hashable, bool], position: Position = position_of) -> Positions:
    """A row's cells (cell key → answered right) counted by position, with the interval of the
    module's docstring; ``ValueError`` on no cell."""
    tally = by_position(cells, position)
    if not tally:
        raise ValueError("a share needs at least one cell (n = 0)")
    n = len(tally)
    mean = sum(r / a for r, a in tally.values()) / n
    return Positions(
        sum(r for r, _ in tally.values()),
        sum(a for _, a in tally.values()),
        n,
        sum(r > 0 for r, _ in tally.values()),
        mean,
        *_wilson_fraction(mean, n),
    )


def _wilson_fraction(mean: float, n: int) -> tuple[float, float]:
    """Wilson's score interval at :data:`CONFIDENCE` for a mean ``mean`` of ``n`` values in
    [0, 1] (the binomial one when each value is 0 or 1)."""
    z = float(norm.ppf(0.5 + CONFIDENCE / 2))
    z2 = z * z
    centre = (mean + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(mean * (1 - mean) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Paired:
    """Two rows on their shared positions: ``n`` positions holding ``needles`` needles both were
    asked, of which A answered ``right_a`` and B ``right_b``; ``more_a`` positions where A
    answered more of them, ``more_b`` where B did, and the exact sign test's two-sided ``p``."""

    n: int
    needles: int
    right_a: int
    right_b: int
    more_a: int
    more_b: int
    p: float

    @property
    def differs(self) -> bool:
        """Whether the test supports a difference at :data:`ALPHA`."""
        return self.p < ALPHA

    @property
    def ties(self) -> int:
        return self.n - self.more_a - self.more_b

    @property
    def decidable(self) -> bool:
        """Whether the pages compare on these ``n`` positions at all: at least
        :data:`MIN_POSITIONS` of them."""
        return self.n >= MIN_POSITIONS

    def counts(self) -> str:
        """``positions 3 won by the first, 1 by the second, 11 tied of 15``."""
        return (
            f"positions {self.more_a} won by the first, {self.more_b} by the second, "
            f"{self.ties} tied of {self.n}"
        )

    def undecided(self) -> str:
        """What the pages say without a difference: not distinguishable with ``n`` positions,
        or, below :data:`MIN_POSITIONS`, that the rows are not compared."""
        if not self.decidable:
            return not_compared(self.n)
        return f"not distinguishable with n = {self.n} positions"


def not_compared(n: int, what: str = "positions") -> str:
    """What the pages and the findings say in place of a comparison over fewer than
    :data:`MIN_POSITIONS` positions: ``not compared (5 positions, fewer than 10)``."""
    if n == 1:
        what = what.removesuffix("s")
    return f"not compared ({n} {what}, fewer than {MIN_POSITIONS})"


def sign_test(more_a: int, more_b: int) -> float:
    """Exact two-sided sign test of ``more_a`` positions won by A against ``more_b`` won by B
    (ties dropped before): 1.0 when none is won by either."""
    more_a, more_b = _count("more_a", more_a), _count("more_b", more_b)
    d = more_a + more_b
    if d == 0:
        return 1.0
    return _two_sided(more_a, d)


def min_p(n: int) -> float:
    """The smallest two-sided p a sign test on ``n`` positions can give: every one won by the
    same row (1.0 on none)."""
    n = _count("n", n)
    return 1.0 if n == 0 else _two_sided(n, n)


@functools.lru_cache(maxsize=4096)
def _two_sided(k: int, d: int) -> float:
    return float(binomtest(k, d, 0.5, alternative="two-sided").pvalue)


def paired(
    a: Mapping[Hashable, bool], b: Mapping[Hashable, bool], position: Position = position_of
) -> Paired:
    """The exact sign test of rows ``a`` and ``b`` (cell key → answered right) on the positions
    where both have cells, counting at each only the needles both were asked; ``ValueError`` if
    they share no cell."""
    shared = [k for k in a if k in b]
    if not shared:
        raise ValueError("the two rows share no cell: they cannot be compared position by position")
    ta = by_position({k: a[k] for k in shared}, position)
    tb = by_position({k: b[k] for k in shared}, position)
    more_a = sum(ta[p][0] > tb[p][0] for p in ta)
    more_b = sum(ta[p][0] < tb[p][0] for p in ta)
    return Paired(
        n=len(ta),
        needles=len(shared),
        right_a=sum(r for r, _ in ta.values()),
        right_b=sum(r for r, _ in tb.values()),
        more_a=more_a,
        more_b=more_b,
        p=sign_test(more_a, more_b),
    )


def p_text(p: float) -> str:
    """``p = 0.062`` (``p < 0.001`` below that)."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"
