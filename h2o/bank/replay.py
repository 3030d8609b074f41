"""Replay a bank over a trace in lock-step: :func:`h2o.replay` (unrecorded) for every lane at once.

At step ``t`` each lane is shown ``row(t)`` restricted to its kept positions and renormalised
over them, exactly as :func:`h2o.replay` does it: when the lanes' fills agree, one gather
builds the ``(N, n)`` block, one reduction gives every lane's float64 mass (numpy sums each
row's contiguous run pairwise, as it sums a 1-D array, so each mass is bit-identical to the
single replay's) and one float32 division renormalises the rows. Then the bank steps and evicts.
Fills that differ (lanes with different budgets) go lane by lane; a bank of one lane runs
:func:`h2o.replay` itself.

The steady state of a scored bank (:func:`_steady`): once every lane is full, each step admits
one position and evicts one, and a lane's protected window is exactly the ``w`` positions
before ``t`` (each was protected since it came). So a lane's slots are split into a *pool* (the
evictable positions, in any order) and a *ring* of ``w`` slots where position ``p`` sits at
``p mod w``: step ``t`` moves ``t - w`` out of the ring into the contest and puts ``t`` in its
slot; the victim's slot takes ``t - w`` if the pool loses one. Nothing shifts: the scores are
the instances' (each slot is added to in step order, whatever its column), the victim is the
first minimum in position order (the pool's minimum, ties to its lowest position, against
``t - w``, which loses ties: it is the newest evictable), and the masses are the same sums in
another order — exact, hence equal, when every weight of the trace is 0 or at least 2**-29
(rows sum to 1 within 2e-3, as every trace is checked): float64 then holds every partial sum
exactly (:func:`_exact_sums`). Traces that do not qualify, random eviction and lanes with
different budgets keep the per-step path. At the end the lanes are written back in kept order.

Before the first eviction the lanes of such a bank are all alike: those steps run once, on one
row (:func:`_fill_shared`). A ring bank (StreamingLLM, the sliding window) reads no attention,
so on such a trace its whole replay is closed-form (:func:`_rings_closed`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from itertools import pairwise

import numpy as np

from h2o.policies import H2O, TOVA, Scissorhands
from h2o.replay import Replay, check_top_k, replay, result
from h2o.trace import ROW_SUM_TOLERANCE, Trace

from .base import PolicyBank
from .ring import RingBank
from .scored import ScoredBank

_minimum, _any = np.minimum.reduce, np.logical_or.reduce
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
    went: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]] = []
    f64, f32, total = np.float64, np.float32, np.add.reduce
    reads, weights = bank.reads_attention, trace.weights  # row t starts at t(t-1)/2
    steady = _steady_from(bank, trace)
    start = _fill_shared(bank, weights, steps, mass, fill, progress)
    if _rings_closed(bank, trace, mass, fill, n_kept, went):
        start = steps  # nothing left to step
    for t in range(start, steps):
        if progress is not None and t % PROGRESS_EVERY == 0:
            progress(t, steps)
        if t == steady and bank._fill == bank._budget:
            victims = np.empty((steps - t, size), dtype=np.intp)
            if _steady(bank, weights, t, steps, mass, victims, progress):
                fill[t:] = bank._budget + 1  # each step admits one before evicting one
                went.append((np.arange(t, steps), None, victims))
                break
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
            went.append((np.array([t]), lanes, victims))
    if progress is not None:
        progress(steps, steps)
    lock = fill >= 0
    n_kept[lock] = fill[lock, None]
    step, lane, pos = _victims(went)
    order = np.argsort(lane, kind="stable")  # by lane, keeping step order
    bounds = np.searchsorted(lane[order], np.arange(size + 1))
    return [
        result(
            bank.lane(i),
            trace,
            top_k,
            mass[:, i].copy(),
            n_kept[:, i].copy(),
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


def _victims(went: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]]) -> tuple:
    """Every eviction as ``(step, lane, position)`` int32 arrays, in step order (ascending
    position within a lane's step), as :func:`h2o.replay` records them. ``went`` holds
    ``([t], lanes, positions)`` per step, or ``(steps, None, (len(steps), N) victims)`` for a
    steady run: one victim per lane and step."""
    if not went:
        return tuple(np.zeros(0, dtype=np.int32) for _ in range(3))
    steps, lanes, pos = [], [], []
    for ts, ls, vs in went:
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
_VOTE = 2.0**32
#: Classes whose rule reads only the step's weights (so lanes that keep the same positions and
#: see the same row stay equal).
_SHARED_FILL = (H2O, Scissorhands, TOVA)


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


def _fill_shared(
    bank: PolicyBank,
    weights: np.ndarray,
    steps: int,
    mass: np.ndarray,
    fill: np.ndarray,
    progress: StepProgress | None,
) -> int:
    """Until the first eviction every lane of a scored bank whose lanes share a budget keeps
    ``0..t-1`` and sees the same row: run those steps on lane 0's row alone — the single
    replay's arithmetic, on 1-D arrays — and copy it to every row. Returns the next step (0 if
    the bank does not qualify)."""
    if not (
        isinstance(bank, ScoredBank)
        and type(bank._lanes[0]) in _SHARED_FILL
        and bank._budget >= 1
        and bank.reads_attention
        and not bank._own_checks
    ):
        return 0
    stop = min(bank._budget, steps)  # step t admits t + 1 <= budget positions: none evicted
    pos, score, rule = bank._pos[0], bank._score[0], bank._rule
    f64, f32, total = np.float64, np.float32, np.add.reduce
    for t in range(stop):
        if progress is not None and t % PROGRESS_EVERY == 0:
            progress(t, steps)
        if t:
            o = t * (t - 1) // 2
            row = weights[o : o + t]
            m = total(row, dtype=f64)
            mass[t] = m
            rule(score[:t], row / f32(m) if m > 0 else row)
        pos[t], score[t] = t, 0.0
        fill[t] = t + 1
    bank._pos[1:, :stop] = pos[:stop]
    bank._score[1:, :stop] = score[:stop]
    bank._fill, bank._last_pos, bank._stale = stop, stop - 1, True
    return stop


def _rings_closed(
    bank: PolicyBank,
    trace: Trace,
    mass: np.ndarray,
    fill: np.ndarray,
    n_kept: np.ndarray,
    went: list,
) -> bool:
    """A ring bank's whole replay in closed form, on a trace whose sums are exact in any order
    (:func:`_exact_sums`). StreamingLLM (and the sliding window, ``sinks = 0``) reads no
    attention, so what a lane keeps is known in advance: before step ``t`` it holds ``0..t-1``
    while ``t <= budget``, then its ``s`` sinks and the ``budget - s`` positions before ``t``;
    step ``t >= budget`` evicts ``t - (budget - s)``. Each mass is the sum of two runs of the
    packed weights (one ``reduceat`` a lane). Fills ``mass``, ``n_kept`` and ``went`` and leaves
    the lanes as the steps would; False (nothing touched) if the bank does not qualify."""
    if not isinstance(bank, RingBank) or not _exact_sums(trace):
        return False
    steps, w = trace.steps, trace.weights
    t = np.arange(1, steps, dtype=np.intp)
    o = t * (t - 1) // 2  # row t is w[o : o + t]
    fills = []
    for i, lane in enumerate(bank._lanes):
        b, s = lane.budget, lane.sinks
        r = b - s  # ring slots
        full = t > b
        sink_end = o + np.where(full, s, t)  # t <= budget: one run, the whole row
        sinks = _runs(w, o, sink_end)
        ring = _runs(w, np.where(full, o + t - r, sink_end), o + t)
        mass[1:, i] = sinks + ring
        n_kept[:, i] = np.minimum(np.arange(1, steps + 1), b + 1)
        ts = np.arange(b, steps)
        went.append((ts, np.full(ts.shape[0], i), ts - r))
        n = min(steps, b)
        kept = np.arange(n) if steps <= b else np.r_[np.arange(s), np.arange(steps - r, steps)]
        bank._pos[i, :n] = kept
        fills.append(n)
    bank._set_fills(np.array(fills, dtype=np.int64))
    bank._last_pos, bank._stale = steps - 1, True
    fill[:] = -1  # n_kept holds every lane's fill
    return True


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


def _steady_from(bank: PolicyBank, trace: Trace) -> int:
    """The step from which :func:`_steady` runs this bank over this trace (-1: never)."""
    if not (
        isinstance(bank, ScoredBank)
        and bank._by_argmin
        and bank.reads_attention
        and 0 <= bank._budget < trace.steps
        and not bank._own_checks
        and _exact_sums(trace)
    ):
        return -1
    return bank._budget  # the first step that evicts: every lane holds 0..budget-1 before it


def _steady(
    bank: ScoredBank,
    weights: np.ndarray,
    t0: int,
    steps: int,
    mass: np.ndarray,
    victims: np.ndarray,
    progress: StepProgress | None,
) -> bool:
    """Steps ``t0..steps-1`` of a full scored bank whose lanes share a budget, one eviction a
    step, with pool and ring slots (module docstring); ``mass[t]`` and ``victims[t - t0]``
    filled in. False (nothing touched) if the lanes are not as the layout assumes."""
    n, size = bank._budget, bank.size
    window = bank._windows.astype(np.intp)
    pool = n - window  # evictable slots after admitting, minus the one leaving the ring
    kept = bank._pos[:, :n]
    for i, w in enumerate(window.tolist()):
        if w and not (kept[i, n - w :] == np.arange(t0 - w, t0)).all():
            return False
    flat = size * n
    # One spare slot a lane past the rows: a lane with no ring takes t there (score 0), and a
    # lane whose pool keeps its slots writes ``t - w`` there instead of into the pool.
    pos_x = np.zeros(flat + size, dtype=np.intp)
    score_x = np.zeros(flat + size)
    pos, score = pos_x[:flat].reshape(size, n), score_x[:flat].reshape(size, n)
    spare_pos = pos_x[flat:]
    for i, (p, w) in enumerate(zip(pool.tolist(), window.tolist(), strict=True)):
        pos[i, :p], score[i, :p] = kept[i, :p], bank._score[i, :p]
        if w:
            ring = p + kept[i, p:n] % w
            pos[i, ring], score[i, ring] = kept[i, p:n], bank._score[i, p:n]
    penalty = np.where(np.arange(n) >= pool[:, None], np.inf, 0.0)  # the rings: never chosen
    # Vote counts (Scissorhands) tie all the time: there the argmin runs on one key per slot,
    # votes * 2**32 + position (+inf on the rings), exact while votes < 2**20 — unique, so the
    # first minimum is the lowest position among the lowest votes.
    votes = type(bank._lanes[0]) is Scissorhands and steps < 2**20
    key_x = np.zeros(flat + size)
    key_pos = key_x[:flat].reshape(size, n)
    np.add(pos, penalty, out=key_pos)
    base = np.arange(size, dtype=np.intp) * n
    ts = np.arange(t0, steps, dtype=np.intp)
    # per step and lane: the flat slot holding t - w, which t takes (no ring: the spare slot)
    spare = np.arange(flat, flat + size, dtype=np.intp)
    ring_at = np.where(window > 0, base + pool + ts[:, None] % np.maximum(window, 1), spare)
    leaving = ts[:, None] - window  # what leaves each window at t (t itself when w = 0)
    w32, w64 = np.empty((size, n), dtype=np.float32), np.empty((size, n))
    ones = np.ones(n)
    tmp = np.empty((size, n))
    tmp_flat = tmp.reshape(-1)
    at, at2 = np.empty(size, dtype=np.intp), np.empty(size, dtype=np.intp)
    tie, goes = np.empty(size, dtype=bool), np.empty(size, dtype=bool)
    rule, score_t, w64_t = bank._rule, score.T, w64.T
    f32, inf = np.float32, np.inf
    for k, t in enumerate(range(t0, steps)):
        if progress is not None and k and t % PROGRESS_EVERY == 0:
            progress(t, steps)
        o = t * (t - 1) // 2
        weights[o : o + t].take(pos, out=w32, mode="wrap")  # every index is in range
        # Each lane's mass: one matrix-vector product of the widened block — exact in any
        # order on these traces, so the same float64 as replay()'s pairwise sum.
        np.copyto(w64, w32)
        m = np.dot(w64, ones, out=mass[t])
        d = m.astype(f32)
        if not _minimum(m) > 0:
            d[~(m > 0)] = 1  # an all-zero row goes through unnormalised
        np.divide(w32, d[:, None], out=w32)  # float32, as replay() divides
        np.copyto(w64, w32)  # widened (exact): float64 adds run faster than mixed ones
        rule(score_t, w64_t)
        ring = ring_at[k]
        out_score = score_x.take(ring)  # the score of t - w, leaving its window now
        if votes:
            np.multiply(score, _VOTE, out=tmp)
            np.add(tmp, key_pos, out=tmp)
            np.add(tmp.argmin(axis=1), base, out=at)
            low = score_x.take(at)
        else:
            np.add(score, penalty, out=tmp)
            np.add(tmp.argmin(axis=1), base, out=at)
            low = tmp_flat.take(at)
            # A second minimum equal to the first is a tie, settled by position (an argmin is
            # cheaper than a minimum along the rows).
            tmp_flat[at] = inf
            np.add(tmp.argmin(axis=1), base, out=at2)
            if _any(np.equal(tmp_flat.take(at2), low, out=tie)):
                _ties(tmp, low, pos, base, at)
        out = np.less(out_score, low, out=goes)  # t - w goes (ties: the pool's lower one goes)
        step_out = leaving[k]
        spare_pos[:] = step_out
        np.copyto(at, spare, where=out)
        pos_x.take(at, out=victims[k])
        pos_x[at] = step_out
        score_x[at] = out_score
        if votes:
            key_x[at] = step_out
        pos_x[ring] = t
        score_x[ring] = 0.0
    order = np.argsort(pos, axis=1)  # back to kept (arrival) order
    bank._pos[:, :n] = np.take_along_axis(pos, order, axis=1)
    bank._score[:, :n] = np.take_along_axis(score, order, axis=1)
    bank._fill, bank._last_pos, bank._stale = n, steps - 1, True
    return True


def _ties(
    tmp: np.ndarray, low: np.ndarray, pos: np.ndarray, base: np.ndarray, at: np.ndarray
) -> None:
    """Where a lane's lowest pool score is held by several slots: the lowest position's slot.
    ``tmp`` holds the masked scores with +inf at each lane's first choice ``at`` (flat);
    ``low`` is each lane's minimum. Whole arrays: for vote counts (Scissorhands) ties are the
    rule, not the exception."""
    tmp.reshape(-1)[at] = low
    mine = np.where(np.equal(tmp, low[:, None]), pos, np.iinfo(np.intp).max)
    np.add(mine.argmin(axis=1), base, out=at)
