"""An adaptive layer: one layer's KV heads sharing the layer's slots, Ada-KV-style, at run time.

The allocation rule and its selection (:func:`h2o.alloc.adaptive.ada_select`) are budget
arithmetic and live in :mod:`h2o.alloc.adaptive`; this is the engine that runs them inside the
model's closed loop, one scored policy per head, the heads' storage one row each of a
``(G, cap)`` array so that one eviction reads them all.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import numpy as np

from h2o.alloc.adaptive import ada_select, adapts, guaranteed_slots
from h2o.policies import ScoredPolicy


class AdaptiveLayer:
    """The heads of one layer sharing ``total`` slots by :func:`ada_select`.

    ``heads[h]`` is the policy the model steps for KV head ``h`` (an :class:`AdaptiveHead`);
    each wraps a fresh scored policy whose own budget is the layer total (it never evicts by
    itself). When the last head has taken its step, the layer evicts for all of them.

    The model may instead step the whole layer at once (:meth:`step`: its heads' signals in,
    every head advanced, then one eviction chosen without sorting — :meth:`_evict_fast`); the
    heads' storage is one row each of ``(G, cap)`` arrays, so that eviction reads all of them
    in one pass. Both ways give the same kept positions and float64 scores, bit for bit.
    """

    #: Past this many victims in one step (not the steady state: there it is one per head),
    #: :meth:`step` hands the eviction to :meth:`evict` (the sort) instead of picking one by one.
    FAST_VICTIMS = 8

    def __init__(self, policies: Sequence[ScoredPolicy], budget: int, alpha: float) -> None:
        policies = list(policies)
        for p in policies:
            if not adapts(p):
                raise ValueError(f"adaptive allocation needs scored policies, got {p!r}")
            if len(p) or p.last_pos >= 0:
                raise ValueError("adaptive allocation is built from fresh policies")
        self.inner = policies
        self.budget = int(budget)
        self.total = self.budget * len(policies)
        self.alpha = float(alpha)
        self.heads = [AdaptiveHead(self, h) for h in range(len(policies))]
        self._victims: list[list[int]] = [[] for _ in policies]
        # One row per head (the policy's own storage, rebound: the same dtypes and capacity).
        G = len(policies)
        cap = max(p.budget + 1 for p in policies)  # a fresh scored policy's own capacity
        self._pos = np.zeros((G, cap), dtype=policies[0].POS_DTYPE)
        self._score = np.zeros((G, cap), dtype=policies[0].SCORE_DTYPE)
        for g, p in enumerate(policies):
            p.bind(self._pos[g], self._score[g])
        self._tmp = np.empty((G, cap))
        self._rows = np.arange(G)
        self._windows = [p.recent_window for p in policies]
        self._penalties: dict[tuple[int, ...], np.ndarray] = {}
        self.wants = [True] * G

    def __deepcopy__(self, memo: dict) -> AdaptiveLayer:
        # the heads' policies store their rows in this layer's arrays: numpy copies each array
        # on its own, so bind the copies' rows again
        new = object.__new__(type(self))
        memo[id(self)] = new
        for name, value in self.__dict__.items():
            new.__dict__[name] = copy.deepcopy(value, memo)
        for g, p in enumerate(new.inner):
            p.bind(new._pos[g], new._score[g])
        return new

    # -- the sequence of heads (what the model checks before running) -------------------------
    def __len__(self) -> int:
        return len(self.heads)

    def __getitem__(self, h: int) -> AdaptiveHead:
        return self.heads[h]

    def __iter__(self):
        return iter(self.heads)

    def kept_rows(self) -> list[np.ndarray]:
        """Each head's kept positions (views, valid until the next step)."""
        pos = self._pos
        return [pos[g, : len(p)] for g, p in enumerate(self.inner)]

    def take_victims(self, head: int) -> list[int]:
        """The positions head ``head`` lost at the layer's last eviction (then forgotten)."""
        out, self._victims[head] = self._victims[head], []
        return out

    def evict(self) -> None:
        """Bring the layer back to ``total`` slots (its heads' victims go to ``_victims``)."""
        n = [len(p) for p in self.inner]
        if sum(n) <= self.total:
            return
        win = [min(p.recent_window, len(p)) for p in self.inner]
        room = self.total - sum(win)
        e = [a - w for a, w in zip(n, win, strict=True)]
        keep = ada_select(
            [self._score[g, :k] for g, k in enumerate(e)],
            [self._pos[g, :k] for g, k in enumerate(e)],
            room,
            max(guaranteed_slots(self.alpha, self.budget, w) for w in win),
        )
        for h, (p, k, kk) in enumerate(zip(self.inner, e, keep, strict=True)):
            if len(kk) == k:
                continue
            mask = np.ones(len(p), dtype=bool)
            mask[:k] = False
            mask[kk] = True
            pos, score = self._pos[h], self._score[h]
            self._victims[h] = pos[: len(p)][~mask].tolist()
            m = int(mask.sum())
            pos[:m] = pos[: len(p)][mask]
            score[:m] = score[: len(p)][mask]
            p.set_fill(m, p.last_pos)

    # -- the whole layer in one call (the model's fast path) ----------------------------------
    def step(self, pos: int, signals: Sequence[np.ndarray | None]) -> None:
        """Every head takes step ``pos`` with its signal, then the layer evicts.

        Trusted, as ``Policy.advance_trusted``: ``pos`` follows the last position and each signal is
        finite, non-negative and aligned with its head's kept positions (the model checks).
        The same arithmetic as each head's ``on_decode_step`` followed by :meth:`evict`.
        """
        pos_, score = self._pos, self._score
        for g, p in enumerate(self.inner):
            n = len(p)
            a = signals[g]
            if a is not None and n:
                p.accumulate(score[g, :n], a)
            pos_[g, n] = pos
            score[g, n] = 0.0
            p.set_fill(n + 1, pos)
        self._evict_fast()

    def _evict_fast(self) -> None:
        """:meth:`evict`, choosing the victims without sorting every slot.

        The slots :func:`ada_select` drops are the lowest-ranked of those outside every head's
        own top ``guaranteed`` (its order: higher score, then higher position, then lower
        head, first): the ``k`` lowest scores among the heads' evictable slots — the lower
        position on a tie, then the higher head — each head giving at most ``evictable -
        guaranteed``. Usually one partition of the stacked scores finds them (``k`` slots
        strictly below every other, none of a head past its quota); otherwise they are picked
        one at a time: a per-row argmin, then the rule among the heads (:meth:`_pick`).
        """
        inner = self.inner
        fills = [len(p) for p in inner]
        k = sum(fills) - self.total
        if k <= 0:
            return
        win = [min(w, n) for w, n in zip(self._windows, fills, strict=True)]
        e = [n - w for n, w in zip(fills, win, strict=True)]
        room = self.total - sum(win)
        guar = max(guaranteed_slots(self.alpha, self.budget, w) for w in win)
        quota = [max(0, x - guar) for x in e]
        if k > self.FAST_VICTIMS or room - sum(min(guar, x) for x in e) < 0:
            self.evict()  # the sort (and its refusal), as each head's evict would run it
            for v in self._victims:
                v.clear()
            return
        tmp = np.add(self._score, self._penalty(e), out=self._tmp)
        flat = tmp.reshape(-1)
        cut = np.partition(flat, (k - 1, k))[k - 1 : k + 1].tolist()  # k-th, (k+1)-th lowest
        chosen: list[list[int]] = [[] for _ in inner]
        if cut[0] < cut[1]:  # no tie at the cut: the k lowest are one set
            cap = tmp.shape[1]
            for j in np.flatnonzero(flat <= cut[0]).tolist():
                chosen[j // cap].append(j % cap)
        if not any(chosen) or any(len(c) > q for c, q in zip(chosen, quota, strict=True)):
            chosen = self._pick(tmp, k, quota)
        pos, score = self._pos, self._score
        for g, cs in enumerate(chosen):
            if not cs:
                continue
            n = fills[g]
            row_p, row_s = pos[g], score[g]
            for c in sorted(cs, reverse=True):  # close each gap, the last first
                row_p[c : n - 1] = row_p[c + 1 : n]
                row_s[c : n - 1] = row_s[c + 1 : n]
                n -= 1
            inner[g].set_fill(n, inner[g].last_pos)

    def _pick(self, tmp: np.ndarray, k: int, quota: list[int]) -> list[list[int]]:
        """The ``k`` victims one at a time from ``tmp`` (scores, +inf past each head's
        evictable slots; modified): the lowest score, then the lower position, then the
        higher head, at most ``quota[g]`` from head ``g``."""
        quota = list(quota)
        for g, q in enumerate(quota):
            if not q:
                tmp[g] = np.inf
        pos, rows = self._pos, self._rows
        chosen: list[list[int]] = [[] for _ in quota]
        for _ in range(k):
            cols = tmp.argmin(axis=1)
            vals = tmp[rows, cols].tolist()
            at = pos[rows, cols].tolist()
            best = -1
            for g, v in enumerate(vals):
                if v == math.inf:
                    continue
                if best < 0 or v < vals[best] or (v == vals[best] and at[g] <= at[best]):
                    best = g
            if best < 0:  # cannot happen (k <= the quotas' sum)
                raise AssertionError("adaptive eviction found no victim")
            c = int(cols[best])
            chosen[best].append(c)
            quota[best] -= 1
            if quota[best]:
                tmp[best, c] = np.inf
            else:
                tmp[best] = np.inf
        return chosen

    def _penalty(self, e: list[int]) -> np.ndarray:
        """``(G, cap)``: 0 on each head's first ``e[g]`` slots (evictable), +inf after."""
        key = tuple(e)
        pen = self._penalties.get(key)
        if pen is None:
            if len(self._penalties) > 64:
                self._penalties.clear()
            cols = np.arange(self._pos.shape[1])
            pen = np.where(cols >= np.array(e)[:, None], np.inf, 0.0)
            self._penalties[key] = pen
        return pen


class AdaptiveHead:
    """One KV head of an :class:`AdaptiveLayer`, with the part of the policy contract the model
    uses (``kept``, ``scores``, ``last_pos``, ``on_decode_step``, ``evict``)."""

    def __init__(self, layer: AdaptiveLayer, head: int) -> None:
        self.layer, self.head = layer, head
        self.policy = layer.inner[head]
        self.reads_attention = True

    @property
    def kept(self) -> np.ndarray:
        return self.policy.kept

    @property
    def scores(self) -> np.ndarray:
        return self.policy.scores

    @property
    def last_pos(self) -> int:
        return self.policy.last_pos

    def __len__(self) -> int:
        return len(self.policy)

    def on_decode_step(self, pos: int, attn: np.ndarray | None) -> None:
        self.policy.on_decode_step(pos, attn)

    def evict(self) -> list[int]:
        """The layer evicts once its last head has stepped; each head returns its victims."""
        if self.head == len(self.layer.heads) - 1:
            self.layer.evict()
        return sorted(self.layer.take_victims(self.head))
