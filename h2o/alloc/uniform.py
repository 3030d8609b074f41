"""Uniform allocation: every (layer, KV head) gets the same budget — the behaviour before
allocators, and the baseline every other allocation is compared with at equal memory.

Rule: ``budget[l, h] = B`` for every layer ``l`` and KV head ``h``; total ``L * G * B``.
"""

from __future__ import annotations

import numpy as np

from .base import Allocator


class Uniform(Allocator):
    name = "uniform"
    label = "uniform"

    def _budgets(self, L, G, B, shares):
        return np.full((L, G), B, dtype=np.int64), {}
