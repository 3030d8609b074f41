"""The scored bank: H2O, Scissorhands, TOVA and random eviction, N lanes as 2-D arrays.

The card's storage, one row per lane: ``(N, cap)`` int32 positions, float64 scores and the byte
of eviction scratch, in kept order. In lock-step (every lane keeps ``n`` positions) one step is::

    rule(score[:, :n], attn)               # the lane class's own _accumulate, on all rows
    pos[:, n], score[:, n] = pos, 0        # admit
    v = argmin of score[r, :n+1-window[r]] # one masked argmin for all rows; first minimum wins
    shift each row left by one from v[r]   # one masked copy for all rows

which is ``ScoredPolicy._step`` and ``_evict`` for every lane at once: ``argmin`` returns the
first minimum (ties to the lower position), and protected slots are masked with ``+inf`` so
they are never chosen before an evictable one. Random eviction draws each victim from its
lane's own generator (the same draw its instance makes), then shifts all rows at once.
Several victims at once, or lanes at different fills, run each lane's own ``_evict``.

In the steady state of a bank whose lanes share one budget (``cap = budget + 1``) the rows are
full, so the arrays are worked whole: contiguous, which numpy runs several times faster than
column slices. The rule sees one more column, a zero weight on the slot about to be admitted
(for rules where that changes nothing), and the shift runs over the flattened arrays (what
spills into a row's last slot is past its fill).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from h2o.policies import H2O, TOVA, Policy, RandomEviction, Scissorhands, ScoredPolicy

from .base import _NONE, PolicyBank

#: The classes a scored bank holds: the library's own. Their rules read float32 weights exactly
#: as their float64 widening (a sum, a copy, a comparison with a float64 fair share, nothing),
#: so the bank widens first, which numpy adds faster than it casts inside a strided add.
_CLASSES = (H2O, Scissorhands, TOVA, RandomEviction)
#: Rules for which a zero weight on one more slot changes no other slot (Scissorhands' fair
#: share depends on how many slots there are).
_PADS_EXACTLY = {cls._accumulate for cls in (H2O, TOVA, RandomEviction)}


#: Up to this many rows (a model layer's KV heads) a bank works on row slices: the whole-array
#: forms (widened blocks, masks, flat shifts) only pay off for many rows.
_FEW = 8


@lru_cache(maxsize=8)
def _tails(cap: int) -> np.ndarray:
    """``(cap + 1, cap)`` bool, read-only: row ``v`` marks the slots a victim at ``v`` shifts
    (``v`` and after; row ``cap`` marks none). Shared by every bank of that capacity."""
    table = np.arange(cap) >= np.arange(cap + 1)[:, None]
    table.flags.writeable = False
    return table


class ScoredBank(PolicyBank):
    """Lanes of one :class:`~h2o.policies.ScoredPolicy` class, each with its budget and window."""

    def _kind(self, policies: list[Policy]) -> None:
        cls = type(policies[0])
        if cls not in _CLASSES or any(type(p) is not cls for p in policies):
            raise ValueError(
                "a scored bank holds policies of one class: H2O, Scissorhands, TOVA or "
                "RandomEviction"
            )

    def _lane(self, policy: Policy) -> Policy:
        return type(policy)(**policy.params(), rng=policy.rng)

    def _setup(self) -> None:
        lane = self._lanes[0]
        windows = np.array([lane.recent_window for lane in self._lanes])
        self._window = int(windows[0]) if (windows == windows[0]).all() else -1
        self._windows = windows
        # The class's scoring rule, applied to every row: given (n, N) views, a rule written for
        # one lane's (n,) arrays (elementwise, attn.shape[0] = kept count) is the same rule.
        self._rule = lane._accumulate
        self._by_argmin = type(lane)._select is ScoredPolicy._select
        self._pads = type(lane)._accumulate in _PADS_EXACTLY

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
        for i, lane in enumerate(self._lanes):  # each lane's storage is its row
            lane._pos, lane._score, lane._scratch = self._pos[i], self._score[i], self._scratch[i]
        self._cap = cap
        self._cols = np.arange(cap)
        self._tail = _tails(cap) if cap <= 2048 else None  # past that, compared anew each time
        self._tmp = np.empty((self.size, cap))
        self._wide = np.zeros((self.size, cap)) if self._pads else None  # last column stays 0
        self._penalties: dict[int, np.ndarray] = {}

    def _advance_lockstep(self, pos: int, attn: np.ndarray | None) -> None:
        n = self._fill
        if n == self._cap:  # admitted past budget + 1 without evicting
            self._reserve(n + 1)
        score = self._score
        if attn is not None and n:
            if self._pads and n == self._cap - 1 and self.size > _FEW:  # full rows, whole
                self._wide[:, :n] = attn
                self._rule(score.T, self._wide.T)
            else:
                if attn.dtype == np.float32 and attn.size > 2048:
                    attn = attn.astype(np.float64)  # small blocks: one cast-add is cheaper
                self._rule(score[:, :n].T, attn.T)
        self._pos[:, n] = pos
        score[:, n] = 0.0
        self._fill = n + 1
        self._last_pos = pos
        self._stale = True

    def _penalty(self, n: int) -> np.ndarray:
        """``(N, n)``: 0 on the slots each lane may evict when it keeps ``n``, +inf on those its
        window protects — added to the scores, one argmin finds every lane's victim."""
        pen = self._penalties.get(n)
        if pen is None:
            if len(self._penalties) > 8:
                self._penalties.clear()
            protected = self._cols[:n] >= (n - self._windows)[:, None]
            pen = self._penalties[n] = np.where(protected, np.inf, 0.0)
        return pen

    def _evict_lockstep(
        self, k: np.ndarray | int, victims: bool = True
    ) -> tuple[np.ndarray, np.ndarray] | None:
        if k > 1 if isinstance(k, int) else k.max() > 1:
            return None
        n, score, pos = self._fill, self._score, self._pos
        full = n == self._cap
        if not self._by_argmin:  # random: each lane draws from its own generator
            evictable = n - self._windows
            v = np.full(self.size, n)
            for i in range(self.size) if isinstance(k, int) else np.flatnonzero(k == 1):
                v[i] = self._lanes[i]._select(1, int(evictable[i]))[0]
        elif self._window >= 0 and (not full or self.size <= _FEW):
            v = score[:, : n - self._window].argmin(axis=1)  # one window: a slice, no mask
        else:
            # x + 0 is x and x + inf is inf, so the first minimum is the first evictable one —
            # unless a protected score is NaN or -inf (NaN after the add): then each lane itself.
            sum_ = np.add(score, self._penalty(n), out=self._tmp) if full else None
            if sum_ is None:
                sum_ = np.add(score[:, :n], self._penalty(n), out=self._tmp[:, :n])
            v = sum_.argmin(axis=1)
            if (v >= n - self._windows).any():
                return None
        if isinstance(k, int):
            lanes = self._all
            self._fill = n - 1
        else:
            one = k == 1
            lanes = np.flatnonzero(one)
            v[~one] = n  # shifts nothing
            self._set_fills(n - one)
        out = (lanes, pos[lanes, v[lanes]]) if victims else _NONE
        self._shift(v, n, full)
        return out

    def _shift(self, v: np.ndarray, n: int, full: bool) -> None:
        """Close each row's gap: slots ``v..n-2`` take ``v+1..n-1``."""
        pos, score, tail = self._pos, self._score, self._tail
        if self.size <= 4:  # a few rows (a model layer's heads): a slice move each is cheaper
            for r, vr in enumerate(v.tolist()):
                if vr < n - 1:
                    pos[r, vr : n - 1] = pos[r, vr + 1 : n]
                    score[r, vr : n - 1] = score[r, vr + 1 : n]
            return
        if full and tail is not None:  # one flat copy; a row's last slot takes the next row's
            shift = tail[v].reshape(-1)[:-1]  # first, and is past the row's fill
            np.copyto(pos.reshape(-1)[:-1], pos.reshape(-1)[1:], where=shift)
            np.copyto(score.reshape(-1)[:-1], score.reshape(-1)[1:], where=shift)
            return
        lo = int(v.min())  # only the columns from the first victim on
        shift = tail[v, lo : n - 1] if tail is not None else self._cols[lo : n - 1] >= v[:, None]
        np.copyto(pos[:, lo : n - 1], pos[:, lo + 1 : n], where=shift)
        np.copyto(score[:, lo : n - 1], score[:, lo + 1 : n], where=shift)
