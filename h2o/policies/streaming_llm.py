"""StreamingLLM (Xiao et al., ICLR 2024, https://arxiv.org/abs/2309.17453).

Attention sinks: the first few positions collect a large share of attention whatever they
contain, because softmax must put its mass somewhere. Keep them pinned, and keep the rest of the
budget as a ring buffer of the most recent positions. No scores, no arithmetic: O(1) per step.

    on_decode_step(pos, attn):             # attn is not read
        if len(sinks) < n_sinks: sinks.append(pos)
        else: ring.push(pos)
    evict(budget):
        ring.pop_oldest(len(kept) - budget)

``sinks >= budget`` is refused (the ring would have no room). ``kept`` is the sinks followed by
the ring from oldest to newest, which is arrival order. Scores are all zero.
"""

from __future__ import annotations

import numpy as np

from .base import Policy, check_int, check_room


class StreamingLLM(Policy):
    name = "streaming-llm"
    bank = "ring"
    label = "StreamingLLM"
    colour, line_style = "#F28E2B", ("solid", "triangle-up", 9)  # on every chart
    reads_attention = False
    pins_sinks = True
    score_label = "(no score)"
    evicts_by = "age"

    def __init__(
        self, budget: int = 512, sinks: int = 4, *, rng: np.random.Generator | None = None
    ) -> None:
        super().__init__(budget, rng=rng)
        self.sinks = check_int("sinks", sinks, 0)
        self.check_budget(self.budget)
        self._sink = np.zeros(self.sinks, dtype=np.int32)
        self._ns = 0
        self._ring = np.zeros(self.budget - self.sinks + 1, dtype=np.int32)
        self._head = 0  # index of the oldest ring entry
        self._count = 0

    def params(self) -> dict[str, int]:
        return {"budget": self.budget, "sinks": self.sinks}

    def __len__(self) -> int:
        return self._ns + self._count

    @property
    def droppable(self) -> int:
        return self._count  # the ring; the sinks are never evicted

    @property
    def kept(self) -> np.ndarray:
        cap, h, c = self._ring.shape[0], self._head, self._count
        parts = [
            self._sink[: self._ns],
            self._ring[h : min(h + c, cap)],
            self._ring[: max(0, h + c - cap)],
        ]
        v = np.concatenate(parts)
        v.flags.writeable = False
        return v

    @property
    def scores(self) -> np.ndarray:
        v = np.zeros(len(self))
        v.flags.writeable = False
        return v

    def check_budget(self, budget: int) -> int:
        budget = super().check_budget(budget)
        check_room("sinks", self.sinks, budget, "the ring of recent positions would have no room")
        return budget

    def _step(self, pos: int, attn: np.ndarray | None) -> None:
        if self._ns < self.sinks:
            self._sink[self._ns] = pos
            self._ns += 1
            return
        cap = self._ring.shape[0]
        if self._count == cap:  # admitted past budget + 1 without evicting: unroll and grow
            self._ring = np.concatenate([self.kept[self._ns :], np.zeros(cap, dtype=np.int32)])
            self._head, cap = 0, 2 * cap
        self._ring[(self._head + self._count) % cap] = pos
        self._count += 1

    def _resume(self, kept: np.ndarray, scores: np.ndarray) -> None:
        ns = min(self.sinks, kept.shape[0])
        self._sink[:ns], self._ns = kept[:ns], ns
        ring = kept[ns:]
        if ring.shape[0] > self._ring.shape[0]:
            self._ring = np.zeros(ring.shape[0], dtype=np.int32)
        self._ring[: ring.shape[0]], self._head, self._count = ring, 0, ring.shape[0]

    def _evict(self, k: int) -> list[int]:
        cap, h = self._ring.shape[0], self._head
        victims = [int(self._ring[(h + j) % cap]) for j in range(k)]
        self._head = (h + k) % cap
        self._count -= k
        return victims
