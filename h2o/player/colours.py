"""The heatmaps' colour scale: a raw score to a colour value, the same in the server's figures
and in the browser (``scaleOf`` in ``js/common.js``; ``tests/test_player_twins.py`` runs both on
the same scores)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from h2o.player.constants import LOG_DECADES


@dataclass(frozen=True)
class ColourScale:
    """Raw score → colour value, shared by the panels that show the same kind of score.

    ``hi`` is the largest score of the whole run (not of the visible window), so colours do not
    shift while stepping. With ``log`` the colour follows ``log10(score)`` from ``hi / 10**decades``
    up: a heavy hitter's sum is thousands of times a young position's, and on a linear scale
    everything but the sinks would be the bottom colour. The bottom of the range is pushed below
    the smallest shown score so that kept-but-tiny cells are never the colour of the background.
    """

    hi: float
    log: bool = True
    decades: float = float(LOG_DECADES)
    #: The smallest score, when scores go below 0 (K-norm's minus a key's norm): such a scale is
    #: linear from there, whatever ``log`` asks (a logarithm has no negative scores).
    floor: float = 0.0
    #: Whether the scores are counts, whole numbers (Scissorhands' votes): a log scale starts at
    #: half a count, where 0 is drawn (no count lies between 0 and 1, so the decades below 1 would
    #: hold no score), and every tick is a whole number.
    counts: bool = False

    def __post_init__(self) -> None:
        if self.floor < 0 and self.log:
            object.__setattr__(self, "log", False)

    @property
    def lo(self) -> float:
        if not self.log:
            return min(0.0, self.floor)
        return COUNT_FLOOR if self.counts else self.hi * 10.0**-self.decades

    def values(self, z: np.ndarray) -> np.ndarray:
        if not self.log:
            return z.astype(np.float32, copy=False)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.log10(np.maximum(z, self.lo)).astype(np.float32)

    def zrange(self) -> tuple[float, float]:
        """The colour axis: the bottom 30 % of the span below the lowest score's colour, so a
        kept cell is never the background's."""
        if self.log:
            top, bottom = math.log10(self.hi), math.log10(self.lo)
            return bottom - 0.3 * (top - bottom), top
        return self.lo - 0.3 * (self.hi - self.lo), self.hi

    def ticks(self) -> tuple[list[float], list[str]] | None:
        """The colour bar's tick values (colour values) and labels; None: plotly's own (a linear
        scale of scores that are not counts)."""
        if self.log and self.counts:
            return count_ticks(self.hi)
        if self.log:
            lo, hi = math.log10(self.lo), math.log10(self.hi)
            ds = list(range(math.ceil(lo), math.floor(hi) + 1))
            return [float(d) for d in ds], [f"{10.0**d:g}" for d in ds]
        if self.counts:
            step = count_step(self.hi - self.lo)
            vals = [float(v) for v in range(0, math.floor(self.hi) + 1, step)]
            return vals, [str(int(v)) for v in vals]
        return None

    def colorbar(self, title: str) -> dict:
        bar: dict = {"title": {"text": title, "side": "right"}, "thickness": 14}
        if (ticks := self.ticks()) is not None:
            bar["tickvals"], bar["ticktext"] = ticks
        return bar


#: Where a log scale of counts starts: half a count, the colour of 0.
COUNT_FLOOR = 0.5


def nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, the largest not above ``raw`` (``niceStep`` in
    ``js/common.js``)."""
    p = 10.0 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    m = raw / p if raw > 0 else 1.0
    return (5 if m >= 5 else 2 if m >= 2 else 1) * p


def count_step(span: float) -> int:
    """Whole-number tick spacing for a linear axis of counts spanning ``span``: about five
    ticks, never less than 1."""
    return max(1, int(nice_step(span / 5)))


def count_ticks(hi: float) -> tuple[list[float], list[str]]:
    """A log axis of counts up to ``hi``: 0 at :data:`COUNT_FLOOR`, then 1, 2, 5, 10, 20, 50 …
    (1, 10, 100 … past a hundred, where 1-2-5 would crowd the bar), as (log10 values, labels)."""
    vals = [COUNT_FLOOR]
    mults = (1, 2, 5) if hi <= 100 else (1,)
    d = 0
    while 10**d <= hi:
        vals += [m * 10**d for m in mults if m * 10**d <= hi]
        d += 1
    return [math.log10(v) for v in vals], ["0"] + [str(int(v)) for v in vals[1:]]
