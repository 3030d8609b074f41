"""One policy's whole open-loop replay as one compiled call: a bank of one that knows its trace.

An open-loop replay knows every row in advance, so nothing needs to return to Python between
steps. :func:`replay_lane` runs :func:`h2o.replay`'s loop — gather the row at the kept
positions, sum it in float64, renormalise in float32, the class's rule, admit, evict — for the
library's own H2O, Scissorhands, TOVA, StreamingLLM and sliding window, with the same arithmetic
in the same order, so its results are the loop's bit for bit:

* the mass is numpy's own float64 sum of the gathered float32 row — its pairwise summation
  (eight accumulators up to 128 elements, halves above that) in chunks of numpy's 8192-element
  buffer, transcribed in :func:`_numpy_sum`;
* the rule is the class's own ``rule(score, attn, n)``, compiled from its file
  (:meth:`~h2o.policies.base.ScoredPolicy.compiled_rule`); StreamingLLM and the sliding window
  read nothing and drop the oldest position after their sinks;
* the victim is the first minimum of the evictable prefix, and the survivors close the gap.

Random eviction (its draws come from the instance's numpy generator), a class whose rule numba
cannot compile and a class with mechanics of its own run :func:`h2o.replay`'s Python loop.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from h2o.policies import Policy
from h2o.policies.rule import no_score
from h2o.replay_outcome import Replay, result
from h2o.trace import Trace

from .kernels import PW_BLOCK, apply_rule_to_row, first_min, pairwise_block

#: The buffer a cast reduction fills (numpy sums each pairwise: ``kernels.pairwise_block``).
_BUFFER = 8192


def lane_rule(policy: Policy) -> tuple[bool, int] | None:
    """What :func:`replay_lane` runs for ``policy`` — whether it is a ring (StreamingLLM, the
    sliding window: they keep no score, and the rule passed is never called), and the address of
    its class's rule compiled for float32 weights — or None if it must run in Python (random
    eviction, a rule numba cannot compile, a class with mechanics of its own)."""
    cls = type(policy)
    if cls.declares("bank") == "ring":
        return True, no_score().f32
    compiled = cls.compiled_rule() if hasattr(cls, "compiled_rule") else None
    return None if compiled is None else (False, compiled.f32)


@njit(cache=True, nogil=True)
def _pairwise(a, lo, n):
    """numpy's ``pairwise_sum`` of ``a[lo : lo + n]`` widened to float64."""
    if n <= PW_BLOCK:
        return pairwise_block(a, lo, n, 0.0)
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(a, lo, n2) + _pairwise(a, lo + n2, n - n2)


@njit(cache=True, nogil=True)
def _numpy_sum(a, n):
    """``np.add.reduce(a[:n], dtype=np.float64)`` for float32 ``a``, bit for bit: the cast fills
    8192-element buffers, each summed pairwise into the running total."""
    res = 0.0
    for lo in range(0, n, _BUFFER):
        res += _pairwise(a, lo, min(_BUFFER, n - lo))
    return res


@njit(cache=True, nogil=True)
def replay_lane(
    weights, steps, budget, window, sinks, is_ring, rule, pos, score, record, kept_pos,
    kept_score, mass, recall, topk, n_kept, v_step, v_pos, v_score,
):  # fmt: skip
    """:func:`h2o.replay` of one fresh policy, every step in one call.

    ``pos``/``score`` (``budget + 2`` slots, or fewer when the trace is shorter) hold a scored
    policy's kept positions and scores in kept order; a ring (StreamingLLM, the sliding window)
    needs neither: before step ``t`` it holds ``0..t-1`` until it fills, then its sinks and the
    ``budget - sinks`` positions before ``t``. Filled per step: ``mass``, ``recall`` (the share of
    ``topk[t]``'s positions held), ``n_kept``, the victims (step, position and, when ``record``,
    the score it went with) and, with ``record``, the kept positions and scores after the step's
    update and before its eviction. Returns the final fill."""
    w = np.empty(pos.shape[0], dtype=np.float32)
    q = np.empty(pos.shape[0], dtype=np.float32)
    held = np.zeros(steps, dtype=np.bool_)
    width = topk.shape[1]
    ring = budget - sinks  # a ring's slots after its sinks
    n = 0
    nv = 0
    for t in range(steps):
        o = t * (t - 1) // 2
        if is_ring:
            if t <= budget:  # 0..t-1: one run of the row
                n = t
                for j in range(n):
                    w[j] = weights[o + j]
            else:  # the sinks, then the ring's run
                n = budget
                for j in range(sinks):
                    w[j] = weights[o + j]
                for j in range(ring):
                    w[sinks + j] = weights[o + t - ring + j]
        else:
            for j in range(n):
                w[j] = weights[o + pos[j]]
        m = _numpy_sum(w, n)
        if t:
            mass[t] = m
            valid = min(width, t)
            hits = 0
            for j in range(valid):
                hits += held[topk[t, j]]
            recall[t] = hits / valid
        if is_ring:
            if record:
                for j in range(n):
                    kept_pos[t, j] = j if (t <= budget or j < sinks) else t - ring + j - sinks
                    kept_score[t, j] = 0.0
                kept_pos[t, n] = t
                kept_score[t, n] = 0.0
            n += 1
            held[t] = True
            n_kept[t] = n
            if n > budget:  # the oldest after the sinks goes
                v_step[nv] = t
                v_pos[nv] = t - ring
                v_score[nv] = 0.0 if record else np.nan
                held[t - ring] = False
                nv += 1
            continue
        if n:
            apply_rule_to_row(score, w, q, n, m, rule)
        pos[n] = t
        score[n] = 0.0
        n += 1
        held[t] = True
        n_kept[t] = n
        if record:
            for j in range(n):
                kept_pos[t, j] = pos[j]
                kept_score[t, j] = score[j]
        if n > budget:  # one over: one victim (a fresh replay never holds more)
            v = first_min(score, n - window)
            v_step[nv] = t
            v_pos[nv] = pos[v]
            v_score[nv] = score[v] if record else np.nan
            held[pos[v]] = False
            for j in range(v, n - 1):  # the survivors close the gap, in arrival order
                pos[j] = pos[j + 1]
                score[j] = score[j + 1]
            n -= 1
            nv += 1
    if is_ring:  # the final kept set, for the policy
        n -= 1 if n > budget else 0
        for j in range(n):
            pos[j] = j if (steps <= budget or j < sinks) else steps - ring + j - sinks
    return n


def warm() -> None:
    """Compile (or load from the disk cache) :func:`replay_lane` for the types replay passes."""
    weights = np.full(28, 0.125, dtype=np.float32)
    weights.flags.writeable = False  # a trace's weights are read-only
    topk = np.zeros((8, 2), dtype=np.int32)
    topk.flags.writeable = False
    steps, budget = 8, 3
    for record in (False, True):
        replay_lane(
            weights, steps, budget, 1, 0, False, no_score().f32, np.zeros(5, np.int32), np.zeros(5),
            record, np.full((steps, 4), -1, np.int32), np.full((steps, 4), np.nan), np.ones(steps),
            np.ones(steps), topk, np.zeros(steps, np.int32), np.zeros(steps, np.int32),
            np.zeros(steps, np.int32), np.zeros(steps),
        )  # fmt: skip


def replay_compiled(policy: Policy, trace: Trace, top_k: int, record: bool) -> Replay | None:
    """:func:`h2o.replay` of a fresh ``policy`` through :func:`replay_lane`, the policy left as
    the loop leaves it (``None`` if its class runs in Python: see :func:`lane_rule`)."""
    compiled = lane_rule(policy)
    if compiled is None or trace.weights.dtype != np.float32:
        return None
    steps, budget = trace.steps, policy.budget
    cap = min(budget + 1, steps) + 1
    pos, score = np.zeros(cap, dtype=np.int32), np.zeros(cap)
    mass, recall, n_kept = np.ones(steps), np.ones(steps), np.zeros(steps, dtype=np.int32)
    evicts = max(0, steps - budget)  # one victim a step from the step the cache overflows
    v_step, v_pos = np.zeros(evicts, dtype=np.int32), np.zeros(evicts, dtype=np.int32)
    v_score = np.full(evicts, np.nan)
    shape = (steps, cap - 1) if record else (0, 0)
    kept_pos, kept_score = np.full(shape, -1, dtype=np.int32), np.full(shape, np.nan)
    window = int(getattr(policy, "recent_window", 0))
    sinks = int(getattr(policy, "sinks", 0))
    n = replay_lane(
        trace.weights, steps, budget, window, sinks, *compiled, pos, score, record, kept_pos,
        kept_score, mass, recall, trace.top_k(top_k), n_kept, v_step, v_pos, v_score,
    )  # fmt: skip
    policy.resume(pos[:n], score[:n], steps - 1)
    recorded = (kept_pos, kept_score) if record else (None, None)
    return result(
        policy,
        trace,
        top_k,
        mass,
        n_kept,
        v_step,
        v_pos,
        v_score if record else None,
        *recorded,
        recall=recall,
    )
