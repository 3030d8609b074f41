"""The statistics every comparison on screen rests on: a share with its 95 % Wilson interval, and
an exact paired test of two rows on the cells they share.

A needle cell is one question answered right or wrong, so a row's accuracy over ``n`` cells is a
binomial share: :func:`share` gives it with its Wilson score interval (the interval that stays
inside 0..1 and keeps its coverage at small ``n``; Brown, Cai & DasGupta 2001). Two rows asked the
same cells are paired: only the cells where they disagree say anything about which answers more,
so :func:`paired` runs McNemar's test in its exact form — a two-sided binomial test of the
discordant cells against one half. The pages say one row "answers more" than another only when
that test gives ``p < ALPHA``; otherwise "not distinguishable with n = ...".

The arithmetic is scipy's (:func:`scipy.stats.binomtest`), not written here.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from scipy.stats import binomtest

#: Confidence of every interval shown, and the level a paired test must pass to call a difference.
CONFIDENCE = 0.95
ALPHA = 0.05


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


@dataclass(frozen=True)
class Paired:
    """Two rows on their shared cells: ``n`` cells, ``only_a`` right under A alone, ``only_b``
    under B alone, and the exact McNemar ``p`` (two-sided)."""

    n: int
    right_a: int
    right_b: int
    only_a: int
    only_b: int
    p: float

    @property
    def differs(self) -> bool:
        """Whether the test supports a difference at :data:`ALPHA`."""
        return self.p < ALPHA

    @property
    def discordant(self) -> int:
        return self.only_a + self.only_b


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Exact two-sided McNemar p-value of ``only_a`` against ``only_b`` discordant cells (1.0
    when no cell is discordant: nothing to tell the rows apart)."""
    only_a, only_b = _count("only_a", only_a), _count("only_b", only_b)
    d = only_a + only_b
    if d == 0:
        return 1.0
    return _two_sided(only_a, d)


@functools.lru_cache(maxsize=4096)
def _two_sided(k: int, d: int) -> float:
    return float(binomtest(k, d, 0.5, alternative="two-sided").pvalue)


def paired(a: Mapping[Hashable, bool], b: Mapping[Hashable, bool]) -> Paired:
    """McNemar's exact test of rows ``a`` and ``b`` (cell key → answered right) on the cells both
    have; ``ValueError`` if they share none."""
    shared = [k for k in a if k in b]
    if not shared:
        raise ValueError("the two rows share no cell: they cannot be compared cell by cell")
    ra = sum(bool(a[k]) for k in shared)
    rb = sum(bool(b[k]) for k in shared)
    only_a = sum(bool(a[k]) and not bool(b[k]) for k in shared)
    only_b = sum(bool(b[k]) and not bool(a[k]) for k in shared)
    return Paired(len(shared), ra, rb, only_a, only_b, mcnemar_exact(only_a, only_b))


def p_text(p: float) -> str:
    """``p = 0.062`` (``p < 0.001`` below that)."""
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"
