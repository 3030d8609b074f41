"""Literal pure-Python transcriptions of the policy card's pseudocode.

No numpy, no preallocation, no cleverness: Python lists and floats (which are float64), one loop
per line of the card. They exist to be obviously right, not fast: the tests check the numpy
policies against them step by step, and ``benchmarks/replay.py`` measures how much faster the
numpy versions are.
"""

from __future__ import annotations


class CardH2O:
    """The card's H2O, line by line."""

    def __init__(self, budget: int, recent_window: int = 32) -> None:
        if recent_window >= budget:
            raise ValueError("recentWindow >= budget is refused")
        self.budget = budget
        self.recent_window = recent_window
        self.kept: list[int] = []
        self.score: list[float] = []

    def on_decode_step(self, pos: int, attn: list[float] | None) -> None:
        if attn is not None:  # a null attn is "no information this step"
            for i, weight in enumerate(attn):  # attn is index-aligned with kept
                self.score[i] += float(weight)  # float64
        self.kept.append(pos)  # admit(pos, score = 0)
        self.score.append(0.0)

    def evict(self, budget: int | None = None) -> list[int]:
        budget = self.budget if budget is None else budget
        victims = []
        for _ in range(len(self.kept) - budget):
            evictable = len(self.kept) - self.recent_window
            # argmin over kept[:evictable]; strict < keeps the first (lower position) on ties
            best = 0
            for i in range(1, evictable):
                if self.score[i] < self.score[best]:
                    best = i
            victims.append(self.kept.pop(best))
            self.score.pop(best)
        return sorted(victims)  # ascending position order, not the order chosen


class CardScissorhands(CardH2O):
    """H2O with the cumulative sum replaced by a vote when a weight beats the fair share."""

    def on_decode_step(self, pos: int, attn: list[float] | None) -> None:
        if attn is not None:
            fair_share = 1.0 / len(attn) if len(attn) else 0.0
            attn = [1.0 if float(w) > fair_share else 0.0 for w in attn]
        super().on_decode_step(pos, attn)


class CardTOVA(CardH2O):
    """H2O with the score replaced by the latest step's weight."""

    def __init__(self, budget: int, recent_window: int = 1) -> None:
        super().__init__(budget, recent_window)

    def on_decode_step(self, pos: int, attn: list[float] | None) -> None:
        if attn is not None:
            for i, weight in enumerate(attn):
                self.score[i] = float(weight)
        self.kept.append(pos)
        self.score.append(0.0)


class CardStreamingLLM:
    """Pinned sinks plus the most recent positions."""

    def __init__(self, budget: int, sinks: int = 4) -> None:
        if sinks >= budget:
            raise ValueError("sinks >= budget is refused")
        self.budget, self.sinks = budget, sinks
        self.kept: list[int] = []

    def on_decode_step(self, pos: int, attn: list[float] | None) -> None:
        self.kept.append(pos)

    def evict(self, budget: int | None = None) -> list[int]:
        budget = self.budget if budget is None else budget
        victims = []
        while len(self.kept) > budget:
            victims.append(self.kept.pop(self.sinks))  # the oldest outside the sinks
        return victims


class CardSlidingWindow(CardStreamingLLM):
    def __init__(self, budget: int) -> None:
        super().__init__(budget, sinks=0)


#: Transcription for each policy name (random eviction has none: it is random).
CARD_POLICIES = {
    "h2o": CardH2O,
    "scissorhands": CardScissorhands,
    "tova": CardTOVA,
    "streaming-llm": CardStreamingLLM,
    "sliding-window": CardSlidingWindow,
}
