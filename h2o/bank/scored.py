"""The scored bank: H2O, Scissorhands, TOVA and random eviction, N lanes as 2-D arrays.

The card's storage, one row per lane: ``(N, cap)`` int32 positions, float64 scores and the byte
of eviction scratch, in kept order. In lock-step (every lane keeps ``n`` positions) one step is,
for each row, the card's pseudocode::

    rule(score[:n], attn, n)               # the lane class's own rule, compiled as written
    pos[n], score[n] = pos, 0              # admit
    v = first minimum of score[:n+1-window]
    shift the row left by one from v

— ``ScoredPolicy._step`` and ``_evict`` for every lane, run as compiled loops over the rows
(:mod:`h2o.bank.kernels`: a numpy call costs about a microsecond before it reads any data, so a
dozen of them a step would cost more than the arithmetic of many lanes). Random eviction draws
each victim from its lane's own generator (the same draw its instance makes), then shifts the
rows. Several victims at once, lanes at different fills, weights of another dtype or a class
with checks of its own run each lane's own code.
"""

from __future__ import annotations

import numpy as np

from h2o.policies import Policy
from h2o.policies.base import MAX_WEIGHT
from h2o.policies.registry import BUILT_IN

from .base import NO_VICTIMS, PolicyBank
from .kernels import advance_lanes, evict_lanes, steady_rows, step_lanes

#: Weights the compiled loops read (each dtype is compiled once, then cached on disk).
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_NO_ATTN = np.zeros((0, 0))


class ScoredBank(PolicyBank):
    """Lanes of one :class:`~h2o.policies.ScoredPolicy` class, each with its budget and window."""

    kind = "scored"

    def _kind(self, policies: list[Policy]) -> None:
        cls = type(policies[0])
        if cls.declares("bank") != "scored" or any(type(p) is not cls for p in policies):
            held = [c.__name__ for c in BUILT_IN if c.declares("bank") == "scored"]
            raise ValueError(
                "a scored bank holds policies of one class: "
                + (", ".join(held[:-1]) + " or " + held[-1] if len(held) > 1 else held[0])
            )

    def _lane(self, policy: Policy) -> Policy:
        return type(policy)(**policy.params(), rng=policy.rng)

    def _setup(self) -> None:
        lane = self._lanes[0]
        self._windows = np.array([lane.recent_window for lane in self._lanes], dtype=np.int64)
        self._by_argmin = type(lane).evicts_by_argmin()
        # The class's rule compiled, which the loops call; None (random eviction: no rule) runs
        # each lane's own code.
        self._compiled = type(lane).compiled_rule()
        # A class that folds attention in numpy its own way (random eviction: not at all) is
        # given (n, N) views: its code, written for one lane's (n,) arrays elementwise, is the
        # same rule for every lane at once. A rule(score, attn, n) runs lane by lane.
        self._by_lane = type(lane).rule is not None
        self._go = np.ones(self.size, dtype=np.bool_)
        self._out = np.empty(self.size, dtype=np.int64)
        self._rows_scratch: tuple[np.ndarray, ...] | None = None  # step_rows' buffers

    def _reserve(self, cap: int) -> None:
        if cap <= self._cap:
            return
        cap = max(cap, 2 * self._cap)
        old = (self._pos, self._score, self._scratch) if self._cap else None
        lane = self._lanes[0]
        self._pos = np.zeros((self.size, cap), dtype=lane.POS_DTYPE)
        self._score = np.zeros((self.size, cap), dtype=lane.SCORE_DTYPE)
        self._scratch = np.zeros((self.size, cap), dtype=lane.SCRATCH_DTYPE)
        if old is not None:
            for new, a in zip((self._pos, self._score, self._scratch), old, strict=True):
                new[:, : self._cap] = a
        self._bind_lanes()
        self._cap = cap
        self._cols = np.arange(cap)

    def _bind_lanes(self) -> None:
        for i, lane in enumerate(self._lanes):  # each lane's storage is its row
            lane.bind(self._pos[i], self._score[i], self._scratch[i])

    def _compiles(self, attn: np.ndarray | None) -> bool:
        """Whether the compiled loops take this step (its weights are float32 or float64)."""
        return self._compiled is not None and (attn is None or attn.dtype in _FLOATS)

    def _advance_block(self, pos: int, attn: np.ndarray) -> bool:
        if not self._compiles(attn):
            return super()._advance_block(pos, attn)
        return self._advance_lockstep(pos, attn, checked=False)

    def _advance_lockstep(self, pos: int, attn: np.ndarray | None, checked: bool = True) -> bool:
        """One step of lanes of equal fill; ``checked=False``: the compiled loop checks the
        weights first (False, nothing changed, if one is refused)."""
        n = self._fill
        if n == self._cap:  # admitted past budget + 1 without evicting
            self._reserve(n + 1)
        if self._compiles(attn):
            a = _NO_ATTN if attn is None or not n else np.ascontiguousarray(attn)
            rule = self._compiled.for_weights(a.dtype)
            if not advance_lanes(self._pos, self._score, n, pos, a, rule, not checked, MAX_WEIGHT):
                return False
        else:
            score = self._score
            if attn is not None and n:
                if self._by_lane:
                    for i, lane in enumerate(self._lanes):
                        lane.accumulate(score[i, :n], attn[i])
                else:
                    self._lanes[0].accumulate(score[:, :n].T, attn.T)
            self._pos[:, n] = pos
            score[:, n] = 0.0
        self._fill = n + 1
        self._last_pos = pos
        self._stale = True
        return True

    def step_trusted(self, pos: int, attn: np.ndarray | None) -> bool:
        # The steady state (every lane at the one budget): one compiled call steps and evicts,
        # after checking every weight is finite (else nothing moves).
        n = self._fill
        if n != self._budget or n >= self._cap or not self._compiles(attn):
            return super().step_trusted(pos, attn)
        a = _NO_ATTN if attn is None or not n else np.ascontiguousarray(attn)
        rule = self._compiled.for_weights(a.dtype)
        if not step_lanes(self._pos, self._score, n, pos, a, rule, self._windows):
            return False
        self._last_pos = pos
        self._stale = True
        return True

    def step_rows(self, p: np.ndarray, t0: int, i0: int, mask: np.ndarray) -> int:
        # The steady state (every lane at the one budget, evicting one a step, with a compiled
        # rule, on float32 probabilities): the rows in one compiled call (kernels.steady_rows).
        n = self._fill
        if (
            n != self._budget
            or n < 1
            or n >= self._cap
            or self._compiled is None
            or p.dtype != np.float32
            or p.shape[0] != self.size
            or n == t0 + i0  # nothing evicted yet: the per-row path's causal case
        ):
            return i0
        G, gs = p.shape[0], p.shape[1]
        scratch = self._rows_scratch
        if scratch is None or scratch[0].shape != (G, gs, n):
            scratch = self._rows_scratch = (
                np.empty((G, gs, n), np.float32),
                np.empty((G, gs), np.float32),
                np.empty((G, n), np.float32),
                np.empty((64, 4)),  # the pairwise sum's stack
            )
        done = steady_rows(
            p,
            self._pos,
            self._score,
            n,
            t0,
            i0,
            self._windows,
            self._compiled.f32,
            mask,
            *scratch,
        )
        if done > i0:
            self._last_pos = t0 + done - 1
            self._stale = True
        return done

    def _evict_lockstep(
        self, k: np.ndarray | int, victims: bool = True
    ) -> tuple[np.ndarray, np.ndarray] | None:
        if k > 1 if isinstance(k, int) else k.max() > 1:
            return None
        n = self._fill
        one = self._go if isinstance(k, int) else k == 1
        lanes = self._all if isinstance(k, int) else np.flatnonzero(one)
        if self._by_argmin:
            evict_lanes(self._pos, self._score, n, self._windows, one, self._out)
            gone = self._out
        else:  # random: each lane draws from its own generator
            evictable = n - self._windows
            v = np.full(self.size, n)
            for i in lanes:
                v[i] = self._lanes[i].select(1, int(evictable[i]))[0]
            gone = np.full(self.size, -1, dtype=np.int64)
            gone[lanes] = self._pos[lanes, v[lanes]]
            self._shift(v, n)
        if isinstance(k, int):
            self._fill = n - 1
            return (lanes, gone.copy()) if victims else NO_VICTIMS
        self._set_fills(n - one)
        return (lanes, gone[lanes]) if victims else NO_VICTIMS

    def _shift(self, v: np.ndarray, n: int) -> None:
        """Close each row's gap: slots ``v..n-2`` take ``v+1..n-1`` (``v = n``: none)."""
        lo = int(v.min())
        if lo >= n - 1:
            return
        shift = self._cols[lo : n - 1] >= v[:, None]
        np.copyto(self._pos[:, lo : n - 1], self._pos[:, lo + 1 : n], where=shift)
        np.copyto(self._score[:, lo : n - 1], self._score[:, lo + 1 : n], where=shift)
