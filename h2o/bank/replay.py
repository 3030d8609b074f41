"""Replay a bank over a trace in lock-step: :func:`h2o.replay` (unrecorded) for every lane at once.

At step ``t`` each lane is shown ``row(t)`` restricted to its kept positions and renormalised
over them, exactly as :func:`h2o.replay` does it: when the lanes' fills agree, one gather
builds the ``(N, n)`` block, one reduction gives every lane's float64 mass (numpy sums each
row's contiguous run pairwise, as it sums a 1-D array, so each mass is bit-identical to the
single replay's) and one float32 division renormalises the rows. Then the bank steps and evicts.
Fills that differ (lanes with different budgets) go lane by lane; a bank of one lane runs
:func:`h2o.replay` itself.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import numpy as np

from h2o.replay import Replay, check_top_k, replay, result
from h2o.trace import Trace

from .base import PolicyBank

_minimum = np.minimum.reduce
#: ``progress(done_steps, steps)``, called every ``PROGRESS_EVERY`` steps.
StepProgress = Callable[[int, int], None]
PROGRESS_EVERY = 512


def replay_bank(
    bank: PolicyBank, trace: Trace, top_k: int = 32, progress: StepProgress | None = None
) -> list[Replay]:
    """``[replay(lane, trace, top_k, record=False) for each lane]``, from one lock-step run of a
    fresh ``bank`` — the same numbers, bit for bit."""
    if bank.last_pos >= 0 or bank.fills.any():
        raise ValueError("replay_bank needs a fresh bank (this one has already taken steps)")
    top_k = check_top_k(top_k)
    if len(bank) == 1:  # one lane: the single replay's own loop is the fastest there is
        return [_replay_one(bank, trace, top_k, progress)]
    steps, size = trace.steps, len(bank)
    mass = np.ones((steps, size))
    n_kept = np.zeros((steps, size), dtype=np.int32)
    fill = np.zeros(steps, dtype=np.int32)  # n_kept of the lock-step steps (-1: see n_kept)
    went: list[tuple[int, np.ndarray, np.ndarray]] = []
    f64, f32, total = np.float64, np.float32, np.add.reduce
    reads, weights = bank.reads_attention, trace.weights  # row t starts at t(t-1)/2
    for t in range(steps):
        if progress is not None and t % PROGRESS_EVERY == 0:
            progress(t, steps)
        o = t * (t - 1) // 2
        row = weights[o : o + t]
        n = bank._fill
        if n >= 0:  # lock-step: one block for every lane
            # Full rows (every lane at its budget, the steady state): gather them whole, which
            # is contiguous, and give the one slot past the fill no weight.
            full = n == bank._cap - 1
            w = row.take(bank._pos) if full else row.take(bank._pos[:, :n])
            if full:
                w[:, n] = 0
            m = total(w[:, :n], axis=1, dtype=f64)
            if t:
                mass[t] = m
            if reads:
                d = m.astype(f32)
                if not _minimum(m) > 0:
                    d[~(m > 0)] = 1  # an all-zero row goes through unnormalised
                np.divide(w, d[:, None], out=w)  # float32, as replay() divides
            bank._advance_lockstep(t, w[:, :n] if reads else None)
        else:  # fills differ: lane by lane, as replay() does it
            rows = []
            for i in range(size):
                w = row[bank.kept(i)]
                m = total(w, dtype=f64)
                if t:
                    mass[t, i] = m
                rows.append((w / f32(m) if m > 0 else w) if reads else None)
            bank._advance(t, rows)
        fill[t] = bank._fill
        if bank._fill < 0:
            n_kept[t] = bank._fills
        lanes, victims = bank._evict()
        if victims.shape[0]:
            went.append((t, lanes, victims))
    if progress is not None:
        progress(steps, steps)
    lock = fill >= 0
    n_kept[lock] = fill[lock, None]
    step, lane, pos = _victims(went)
    evicted_at = np.full((size, steps), steps, dtype=np.int64)  # step each position left
    evicted_at[lane, pos] = step
    order = np.argsort(lane, kind="stable")  # by lane, keeping step order
    bounds = np.searchsorted(lane[order], np.arange(size + 1))
    return [
        result(
            bank.lane(i),
            trace,
            top_k,
            mass[:, i].copy(),
            n_kept[:, i].copy(),
            evicted_at[i],
            step[order[a:b]],
            pos[order[a:b]],
        )
        for i, (a, b) in enumerate(pairwise(bounds))
    ]


def _replay_one(
    bank: PolicyBank, trace: Trace, top_k: int, progress: StepProgress | None
) -> Replay:
    if progress is not None:
        progress(0, trace.steps)
    lane = bank.lane(0)
    out = replay(lane, trace, top_k, record=False)
    bank._last_pos = lane.last_pos
    bank._adopt()
    if progress is not None:
        progress(trace.steps, trace.steps)
    return out


def _victims(went: list[tuple[int, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, ...]:
    """Every eviction as ``(step, lane, position)`` int32 arrays, in step order (ascending
    position within a lane's step), as :func:`h2o.replay` records them."""
    if not went:
        return tuple(np.zeros(0, dtype=np.int32) for _ in range(3))
    counts = [lanes.shape[0] for _, lanes, _ in went]
    step = np.repeat(np.array([t for t, _, _ in went], dtype=np.int32), counts)
    lane = np.concatenate([lanes for _, lanes, _ in went]).astype(np.int32)
    pos = np.concatenate([v for _, _, v in went]).astype(np.int32)
    return step, lane, pos
