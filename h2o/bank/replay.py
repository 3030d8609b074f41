"""Replay a bank over a trace in lock-step: :func:`h2o.replay` (unrecorded) for every lane at once.

At step ``t`` each lane is shown ``row(t)`` restricted to its kept positions and renormalised
over them, exactly as :func:`h2o.replay` does it: when the lanes' fills agree, one gather
builds the ``(N, n)`` block, one reduction gives every lane's float64 mass (numpy sums each
row's contiguous run pairwise, as it sums a 1-D array, so each mass is bit-identical to the
single replay's) and one float32 division renormalises the rows. Then the bank steps and evicts.
Lanes with different budgets, whose fills never agree, and a bank of one lane run
:func:`h2o.replay` for each lane (compiled for the library's rules).

The steady state of a scored bank (:func:`_steady`): once every lane is full, each step admits
one position and evicts one. Those steps run in a compiled loop (:mod:`h2o.bank.kernels`), the
card's pseudocode on each lane's row: the same kept order, float64 scores added in step order,
the first minimum of the evictable prefix, so the instances' results by construction. Its masses
are sums in order rather than numpy's pairwise order — exact, hence equal, when every weight of
the trace is 0 or at least 2**-29 (rows sum to 1 within 2e-3, as every trace is checked): float64
then holds every partial sum exactly (:func:`_exact_sums`). Traces that do not qualify and
random eviction keep the per-step numpy path.

A ring bank (StreamingLLM, the sliding window) reads no attention, so on such a trace its whole
replay is closed-form (:func:`_rings_closed`).
"""

from __future__ import annotations

import weakref
from itertools import pairwise
from typing import TYPE_CHECKING

import numpy as np

from h2o.progress import Progress
from h2o.replay_outcome import Replay, check_top_k, result
from h2o.stepwise import replay_stepwise
from h2o.trace import ROW_SUM_TOLERANCE, Trace

from .kernels import replay_steady
from .lane import replay_compiled

if TYPE_CHECKING:  # the bank's classes build on this module (PolicyBank mixes it in)
    from .base import PolicyBank

_minimum = np.minimum.reduce
#: Steps between two progress reports (``progress(done_steps, steps, "steps")``).
PROGRESS_EVERY = 512


def replay_bank(
    bank: PolicyBank, trace: Trace, top_k: int = 32, progress: Progress | None = None
) -> list[Replay]:
    """``[replay(lane, trace, top_k, record=False) for each lane]``, from one lock-step run of a
    fresh ``bank`` — the same numbers, bit for bit (:meth:`LockstepReplay.replay`)."""
    return bank.replay(trace, top_k, progress)


class LockstepReplay:
    """:meth:`replay`, the lock-step replay of a bank (mixed into :class:`~h2o.bank.PolicyBank`,
    so it reads the bank's own state)."""

    def replay(
        self, trace: Trace, top_k: int = 32, progress: Progress | None = None
    ) -> list[Replay]:
        """``[replay(lane, trace, top_k, record=False) for each lane]``, from one lock-step run of
        this fresh bank — the same numbers, bit for bit."""
        if self.last_pos >= 0 or self.fills.any():
            raise ValueError("replay_bank needs a fresh bank (this one has already taken steps)")
        top_k = check_top_k(top_k)
        if len(self) == 1 or (self._budget < 0 and not self._rings_close(trace)):
            # One lane, or lanes of different budgets (their fills never agree, so no step is
            # lock-step) that no closed form replays: each lane's own replay, the library's
            # rules compiled, is the fastest.
            return self._replay_each(trace, top_k, progress)
        steps, size = trace.steps, len(self)
        mass = np.ones((steps, size))
        n_kept = np.zeros((steps, size), dtype=np.int32)
        fill = np.zeros(steps, dtype=np.int32)  # n_kept of the lock-step steps (-1: see n_kept)
        evictions: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]] = []
        f64, f32, total = np.float64, np.float32, np.add.reduce
        reads, weights = self.reads_attention, trace.weights  # row t starts at t(t-1)/2
        steady = self._steady_from(trace)
        start = steps if self._rings_closed(trace, mass, fill, n_kept, evictions) else 0
        for t in range(start, steps):
            if progress is not None and t % PROGRESS_EVERY == 0:
                progress(t, steps, "steps")
            if t == steady and self._fill == self._budget:
                victims = np.empty((steps - t, size), dtype=np.intp)
                self._steady(weights, t, steps, mass, victims, progress)
                fill[t:] = self._budget + 1  # each step admits one before evicting one
                evictions.append((np.arange(t, steps), None, victims))
                break
            row_at = t * (t - 1) // 2
            row = weights[row_at : row_at + t]
            n = self._fill  # every lane's: the lanes share a budget, so their fills agree
            # Full rows (every lane at its budget, the steady state): gather them whole, which
            # is contiguous, and give the one slot past the fill no weight.
            full = n == self._cap - 1
            block = row.take(self._pos) if full else row.take(self._pos[:, :n])
            if full:
                block[:, n] = 0
            masses = total(block[:, :n], axis=1, dtype=f64)
            if t:
                mass[t] = masses
            if reads:
                divisors = masses.astype(f32)
                if not _minimum(masses) > 0:
                    divisors[~(masses > 0)] = 1  # an all-zero row goes through unnormalised
                np.divide(block, divisors[:, None], out=block)  # float32, as replay() divides
            self._advance_lockstep(t, block[:, :n] if reads else None)
            fill[t] = self._fill
            lanes, victims = self._evict()
            if victims.shape[0]:
                evictions.append((np.array([t]), lanes, victims))
        if progress is not None:
            progress(steps, steps, "steps")
        lock = fill >= 0
        n_kept[lock] = fill[lock, None]
        step, lane, pos = _victims(evictions)
        order = np.argsort(lane, kind="stable")  # by lane, keeping step order
        bounds = np.searchsorted(lane[order], np.arange(size + 1))
        return [
            result(
                self.lane(i),
                trace,
                top_k,
                mass[:, i].copy(),
                n_kept[:, i].copy(),
                step[order[a:b]],
                pos[order[a:b]],
            )
            for i, (a, b) in enumerate(pairwise(bounds))
        ]

    def _replay_each(self, trace: Trace, top_k: int, progress: Progress | None) -> list[Replay]:
        """:func:`h2o.replay` of each lane in turn. ``progress`` counts a lane's steps once it
        is done, at the marks a stepped replay reports (every :data:`PROGRESS_EVERY` steps of
        the lanes' total, scaled to one trace's ``steps``)."""
        steps, size = trace.steps, len(self)
        marks = [*range(0, steps, PROGRESS_EVERY), steps] if size > 1 else [0, steps]
        sent = 0

        def report(done: int) -> None:
            nonlocal sent
            while progress is not None and sent < len(marks) and marks[sent] <= done:
                progress(marks[sent], steps, "steps")
                sent += 1

        out = []
        for i in range(size):
            report(i * steps // size)
            lane = self.lane(i)
            lane.observe(trace)
            # as h2o.replay runs a lane's class: its rule compiled, or one Python step at a time
            one = replay_compiled(lane, trace, top_k, False)
            out.append(
                one if one is not None else replay_stepwise(lane, trace, top_k, record=False)
            )
            self._last_pos = lane.last_pos
        self._adopt()
        report(steps)
        return out

    def _rings_closed(
        self,
        trace: Trace,
        mass: np.ndarray,
        fill: np.ndarray,
        n_kept: np.ndarray,
        evictions: list,
    ) -> bool:
        """A ring bank's whole replay in closed form, on a trace whose sums are exact in any order
        (:func:`_exact_sums`). StreamingLLM (and the sliding window, ``sinks = 0``) reads no
        attention, so what a lane keeps is known in advance: before step ``t`` it holds ``0..t-1``
        while ``t <= budget``, then its ``s`` sinks and the ``budget - s`` positions before ``t``;
        step ``t >= budget`` evicts ``t - (budget - s)``. Each mass is the sum of two runs of the
        packed weights (one ``reduceat`` a lane). Fills ``mass``, ``n_kept`` and ``evictions``
        and leaves the lanes as the steps would; False (nothing touched) if the bank does not
        qualify."""
        if not self._rings_close(trace):
            return False
        steps, w = trace.steps, trace.weights
        t = np.arange(1, steps, dtype=np.intp)
        o = t * (t - 1) // 2  # row t is w[o : o + t]
        fills = []
        for i, lane in enumerate(self._lanes):
            b, s = lane.budget, lane.sinks
            r = b - s  # ring slots
            full = t > b
            sink_end = o + np.where(full, s, t)  # t <= budget: one run, the whole row
            sinks = _runs(w, o, sink_end)
            ring = _runs(w, np.where(full, o + t - r, sink_end), o + t)
            mass[1:, i] = sinks + ring
            n_kept[:, i] = np.minimum(np.arange(1, steps + 1), b + 1)
            ts = np.arange(b, steps)
            evictions.append((ts, np.full(ts.shape[0], i), ts - r))
            n = min(steps, b)
            kept = np.arange(n) if steps <= b else np.r_[np.arange(s), np.arange(steps - r, steps)]
            self._pos[i, :n] = kept
            fills.append(n)
        self._set_fills(np.array(fills, dtype=np.int64))
        self._last_pos, self._stale = steps - 1, True
        fill[:] = -1  # n_kept holds every lane's fill
        return True

    def _rings_close(self, trace: Trace) -> bool:
        """Whether :meth:`_rings_closed` replays this bank over this trace."""
        return self.kind == "ring" and _exact_sums(trace)

    def _steady_from(self, trace: Trace) -> int:
        """The step from which :func:`_steady` runs this bank over this trace (-1: never)."""
        if not (
            self.kind == "scored"
            and self._compiled is not None  # a rule the compiled loop runs (not random eviction)
            and self.reads_attention
            and 0 <= self._budget < trace.steps
            and not self._own_checks
            and _exact_sums(trace)
        ):
            return -1
        return self._budget  # the first step that evicts: every lane holds 0..budget-1 before it

    def _steady(
        self,
        weights: np.ndarray,
        t0: int,
        steps: int,
        mass: np.ndarray,
        victims: np.ndarray,
        progress: Progress | None,
    ) -> None:
        """Steps ``t0..steps-1`` of a full scored bank whose lanes share a budget, one eviction a
        step, in the compiled loop (:func:`h2o.self.kernels.replay_steady`), in runs of
        ``PROGRESS_EVERY`` steps; ``mass[t]`` and ``victims[t - t0]`` filled in."""
        n = self._budget
        for a in range(t0, steps, PROGRESS_EVERY):
            if progress is not None and a > t0:
                progress(a, steps, "steps")
            b = min(steps, a + PROGRESS_EVERY)
            replay_steady(
                weights,
                a,
                b,
                self._pos,
                self._score,
                n,
                self._windows,
                self._compiled.f32,  # the loop's renormalised rows are float32
                mass,
                victims[a - t0 :],
            )
        self._fill, self._last_pos, self._stale = n, steps - 1, True


def _victims(evictions: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]]) -> tuple:
    """Every eviction as ``(step, lane, position)`` int32 arrays, in step order (ascending
    position within a lane's step), as :func:`h2o.replay` records them. ``evictions`` holds
    ``([t], lanes, positions)`` per step, or ``(steps, None, (len(steps), N) victims)`` for a
    steady run: one victim per lane and step."""
    if not evictions:
        return tuple(np.zeros(0, dtype=np.int32) for _ in range(3))
    steps, lanes, pos = [], [], []
    for ts, ls, vs in evictions:
        if ls is not None and ts.shape[0] == ls.shape[0]:  # one victim each, steps and lanes
            steps.append(ts)
            lanes.append(ls)
            pos.append(vs)
        elif ls is None:
            n = vs.shape[1]
            steps.append(np.repeat(ts, n))
            lanes.append(np.tile(np.arange(n), ts.shape[0]))
            pos.append(vs.reshape(-1))
        else:
            steps.append(np.repeat(ts, ls.shape[0]))
            lanes.append(ls)
            pos.append(vs)
    return tuple(np.concatenate(a).astype(np.int32) for a in (steps, lanes, pos))


# -- the steady state of a scored bank ---------------------------------------------------------
#: Traces whose float64 sums of kept weights are exact in any order (see the module docstring).
_EXACT: weakref.WeakKeyDictionary[Trace, bool] = weakref.WeakKeyDictionary()
_TINY = 2.0**-29


def _exact_sums(trace: Trace) -> bool:
    """Whether every weight is 0 or at least 2**-29 (rows sum to about 1): then every partial
    sum of a row's weights is a multiple of 2**-52 below 2, which float64 holds exactly, so the
    sum of any subset is the same in any order. Computed once per trace."""
    ok = _EXACT.get(trace)
    if ok is None:
        # Rows sum to 1 within ROW_SUM_TOLERANCE: every Trace is checked when it is built.
        w = trace.weights
        tiny = w < _TINY
        ok = ROW_SUM_TOLERANCE < 0.5 and not (tiny.any() and (w[tiny] != 0).any())
        _EXACT[trace] = ok
    return ok


def _runs(w: np.ndarray, a: np.ndarray, e: np.ndarray) -> np.ndarray:
    """float64 sums of ``w[a[j] : e[j]]`` (0 when empty): the runs gathered back to back, then
    one ``reduceat`` over them (exact in any order on the traces this is used for)."""
    n = np.maximum(e - a, 0)
    out = np.zeros(a.shape[0])
    some = n > 0
    if not some.any():
        return out
    a, n = a[some], n[some]
    starts = np.zeros(n.shape[0], dtype=np.intp)
    np.cumsum(n[:-1], out=starts[1:])
    idx = np.arange(int(starts[-1] + n[-1]), dtype=np.intp) + np.repeat(a - starts, n)
    out[some] = np.add.reduceat(w.take(idx), starts, dtype=np.float64)
    return out
