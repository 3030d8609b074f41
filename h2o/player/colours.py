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

    def __post_init__(self) -> None:
        if self.floor < 0 and self.log:
            object.__setattr__(self, "log", False)

    @property
    def lo(self) -> float:
        return self.hi * 10.0**-self.decades if self.log else min(0.0, self.floor)

    def values(self, z: np.ndarray) -> np.ndarray:
        if not self.log:
            return z.astype(np.float32, copy=False)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.log10(np.maximum(z, self.lo)).astype(np.float32)

    def zrange(self) -> tuple[float, float]:
        if self.log:
            top = math.log10(self.hi)
            return top - self.decades * 1.3, top
        return self.lo - 0.3 * (self.hi - self.lo), self.hi

    def colorbar(self, title: str) -> dict:
        bar: dict = {"title": {"text": title, "side": "right"}, "thickness": 14}
        if self.log:
            lo, hi = math.log10(self.lo), math.log10(self.hi)
            ticks = [d for d in range(math.ceil(lo), math.floor(hi) + 1)]
            bar["tickvals"] = ticks
            bar["ticktext"] = [f"{10.0**d:g}" for d in ticks]
        return bar
