"""The card's mechanism with a score set when a position is written and never changed.

Some methods know what a position is worth the moment it is written, from one number a captured
trace carries for it, and read no attention: K-norm (minus its key's norm), KVzip (the attention
it receives while the model repeats the text). Their shared mechanics live here, once::

    on_decode_step(pos, attn):             # attn is not read
        admit(pos, score = score_of(value[pos]))

    evict(budget):                          # the card's: argmin outside the recent window
        evictable = kept[: len(kept) - recentWindow]
        drop the `len(kept) - budget` lowest-scoring of those

A subclass names the trace member it reads (``reads_trace``), says how a value becomes a score
(:meth:`WrittenScorePolicy.score_of`) and what it scores by (``scored_by``, for refusals).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from .base import ScoredPolicy


class WrittenScorePolicy(ScoredPolicy):
    """A score per position from the trace, fixed on admission; attention never read."""

    reads_attention = False
    #: What the score is read from, in words, for the refusal ("by its key's norm").
    scored_by: ClassVar[str] = ""
    #: The values scores are read from: none until a subclass's constructor take()s them or a
    #: replay hands over its trace's (:meth:`observe`).
    _values: np.ndarray | None = None

    def take(self, values: object, check: Callable[[object], np.ndarray]) -> None:
        """Hold ``values`` given to the constructor, checked by the trace's own rule and kept at
        the precision given (a replay takes the trace's, :meth:`observe`)."""
        if values is not None:
            check(values)
            self._values = np.asarray(values, dtype=np.float64)

    def observe(self, trace: object) -> None:
        super().observe(trace)
        self._values = getattr(trace, self.reads_trace[0])  # checked by the trace

    def score_of(self, value: float) -> float:
        """The score a position is admitted with, from its value (the value itself here)."""
        return value

    def _admission_score(self, pos: int) -> float:
        values, member = self._values, self.reads_trace[0]
        if values is None or pos >= values.shape[0]:
            have = f"no {member}" if values is None else f"{member} for {values.shape[0]} positions"
            raise ValueError(
                f"{self.label} scores position {pos} {self.scored_by} and has {have}: give "
                f"{member}=… or replay a trace that carries them"
            )
        return self.score_of(float(values[pos]))

    def _accumulate(self, score: np.ndarray, attn: np.ndarray) -> None:
        pass  # a position's score is fixed when it is written: attention is never read
