"""Sliding window — keep only the most recent ``budget`` positions.

The simplest cache there is, and the one StreamingLLM was written to fix: once the first positions
leave the window, the attention they used to absorb ("attention sinks") has nowhere to go. This is
StreamingLLM with zero sinks.
"""

from __future__ import annotations

import numpy as np

from .streaming_llm import StreamingLLM


class SlidingWindow(StreamingLLM):
    name = "sliding-window"
    bank = "ring"
    label = "Sliding window"
    colour, line_style = "#9E622E", ("dashdot", "x", 8)  # on every chart
    pins_sinks = False  # StreamingLLM with zero sinks

    def __init__(self, budget: int = 512, *, rng: np.random.Generator | None = None) -> None:
        super().__init__(budget, sinks=0, rng=rng)

    def params(self) -> dict[str, int]:
        return {"budget": self.budget}
