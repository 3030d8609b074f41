"""Compiled loops for the scored bank: the card's step, lane by lane, with no per-call floor.

A numpy call costs about a microsecond before it touches any data, and one lock-step step of a
bank needs a dozen of them, so many lanes of 256 slots cost tens of microseconds a step however
they are vectorised. These loops (numba, compiled once and cached on disk) run the card's
pseudocode itself on each lane's row of the bank's arrays — the same storage, in kept order —
so their results are the instances' by construction:

* the accumulation is the class's own ``rule(score, attn, n)``, the function written in its file,
  compiled by numba and passed in as the address of that code (``rule``:
  :meth:`~h2o.policies.base.ScoredPolicy.compiled_rule`, for the weights' dtype;
  :func:`~h2o.policies.rule.call_rule`): the loops know no policy by name, are compiled once
  for every rule, and run an edited rule as edited;
* the victim is the first minimum of the evictable prefix (ties to the lower position), and
  the survivors close the gap in arrival order;
* a replay's weights are renormalised by a float32 division, as :func:`h2o.replay` does it.

Each lane's mass is summed in order; :func:`replay_steady` is only used on traces whose sums are
exact in any order (see :func:`h2o.bank.replay._exact_sums`), so it is the pairwise sum's value.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from h2o.policies.rule import call_rule, no_score


@njit(cache=True, nogil=True, inline="always")
def apply_rule_to_row(score, w, q, n, m, rule):
    """A replay's step of the rule: the gathered float32 row ``w[:n]`` renormalised by its
    float64 mass ``m`` with a float32 division into ``q``, as :func:`h2o.replay` divides it (an
    all-zero row goes through unnormalised), then the class's ``rule`` on the ``n`` kept."""
    if m > 0:
        d = np.float32(m)
        for j in range(n):
            q[j] = w[j] / d
        call_rule(rule, score[:n], q[:n], n)
    else:
        call_rule(rule, score[:n], w[:n], n)


@njit(cache=True, nogil=True, inline="always")
def first_min(score, e):
    """numpy's ``argmin(score[:e])`` for scores that are never NaN (the bank's are sums of
    checked weights): the first minimum, found on four interleaved slots at a time — four
    comparison chains side by side — then merged by (value, slot)."""
    v0, v1, v2, v3 = 0, 1, 2, 3
    l0 = score[0]
    l1 = score[1] if e > 1 else np.inf
    l2 = score[2] if e > 2 else np.inf
    l3 = score[3] if e > 3 else np.inf
    e4 = e - e % 4
    for j in range(4, e4, 4):
        x0, x1, x2, x3 = score[j], score[j + 1], score[j + 2], score[j + 3]
        if x0 < l0:
            l0, v0 = x0, j
        if x1 < l1:
            l1, v1 = x1, j + 1
        if x2 < l2:
            l2, v2 = x2, j + 2
        if x3 < l3:
            l3, v3 = x3, j + 3
    for j in range(max(e4, 4), e):  # the last e % 4 slots, later than every chain's own
        if score[j] < l0:
            l0, v0 = score[j], j
    v, low = v0, l0
    if l1 < low or (l1 == low and v1 < v):
        v, low = v1, l1
    if l2 < low or (l2 == low and v2 < v):
        v, low = v2, l2
    if l3 < low or (l3 == low and v3 < v):
        v = v3
    return v


@njit(cache=True, nogil=True, inline="always")
def _evict_one(pos, score, n, evictable):
    """Drop the first minimum of ``score[:evictable]``, shift the rest of ``0..n-1`` left;
    return the victim's position."""
    v = first_min(score, evictable)
    victim = pos[v]
    # Over views from v, indices counted from 0 (known non-negative, so no wraparound test),
    # one array a loop: plain copies, run on vectors.
    p, s = pos[v:n], score[v:n]
    for j in range(n - 1 - v):
        p[j] = p[j + 1]
    for j in range(n - 1 - v):
        s[j] = s[j + 1]
    return victim


@njit(cache=True, nogil=True)
def replay_steady(weights, t0, steps, pos, score, n, windows, rule, mass, victims):
    """Steps ``t0 .. steps - 1`` of a replay for every lane (row) of a full bank: each lane
    keeps ``n`` (its budget) before a step, sees the row restricted to its kept positions and
    renormalised, admits ``t`` and evicts one. Fills ``mass[t]`` and ``victims[t - t0]``."""
    lanes = pos.shape[0]
    w = np.empty(n, dtype=np.float32)
    q = np.empty(n, dtype=np.float32)
    n4 = n - n % 4
    for t in range(t0, steps):
        o = t * (t - 1) // 2
        for lane in range(lanes):
            p, s = pos[lane], score[lane]
            for j in range(n):
                w[j] = weights[o + p[j]]
            # Four running sums, not one: any order gives the same exact sum on these traces,
            # and four chains of additions run side by side.
            m0 = m1 = m2 = m3 = 0.0
            for j in range(0, n4, 4):
                m0 += w[j]
                m1 += w[j + 1]
                m2 += w[j + 2]
                m3 += w[j + 3]
            for j in range(n4, n):
                m0 += w[j]
            m = (m0 + m1) + (m2 + m3)
            mass[t, lane] = m
            apply_rule_to_row(s, w, q, n, m, rule)
            p[n] = t
            s[n] = 0.0
            victims[t - t0, lane] = _evict_one(p, s, n + 1, n + 1 - windows[lane])


@njit(cache=True, nogil=True)
def advance_lanes(pos, score, n, t, attn, rule, check, max_weight):
    """One step of every lane (each keeps ``n``): the rule with ``attn`` (``(lanes, n)``,
    C-contiguous, of the rule's weight type; no columns: no information), then ``t`` admitted
    with score 0 — unless ``check`` and a weight is outside ``[0, max_weight]`` (or NaN): then
    nothing changes and False is returned."""
    if check:
        ok = True
        for lane in range(attn.shape[0]):
            a = attn[lane]
            for j in range(attn.shape[1]):  # no early exit: a loop run on vectors
                ok &= (a[j] >= 0) & (a[j] <= max_weight)
        if not ok:
            return False
    for lane in range(pos.shape[0]):
        if attn.shape[1]:
            call_rule(rule, score[lane, :n], attn[lane, :n], n)
        pos[lane, n] = t
        score[lane, n] = 0.0
    return True


@njit(cache=True, nogil=True)
def evict_lanes(pos, score, n, windows, go, victims):
    """Each lane with ``go`` evicts one of its ``n``: ``victims[lane]`` is its position (-1 for
    the others)."""
    for lane in range(pos.shape[0]):
        victims[lane] = _evict_one(pos[lane], score[lane], n, n - windows[lane]) if go[lane] else -1


@njit(cache=True, nogil=True)
def step_lanes(pos, score, n, t, attn, rule, windows):
    """:func:`advance_lanes`, then every lane evicts one (each was at its budget ``n``), unless
    a weight is not finite: then nothing changes and False is returned."""
    ok = True
    for lane in range(attn.shape[0]):
        a = attn[lane]
        for j in range(attn.shape[1]):
            ok &= abs(a[j]) < np.inf
    if not ok:
        return False
    for lane in range(pos.shape[0]):
        p, s = pos[lane], score[lane]
        if attn.shape[1]:
            call_rule(rule, s[:n], attn[lane, :n], n)
        p[n] = t
        s[n] = 0.0
        _evict_one(p, s, n + 1, n + 1 - windows[lane])
    return True


@njit(cache=True, nogil=True)
def gather_kept(p, pos, n, i, mask, out):
    """The model's closed loop, row ``i`` of a chunk: each KV head ``g``'s kept positions
    ``pos[g, :n]`` marked in ``mask[g, i]``, and every query head's probabilities there copied
    to ``out[g, h, :n]`` — ``p[g, h, i, pos[g, :n]]``, the gather numpy would make."""
    for g in range(p.shape[0]):
        for j in range(n):
            q = pos[g, j]
            mask[g, i, q] = True
            for h in range(p.shape[1]):
                out[g, h, j] = p[g, h, i, q]


#: numpy's pairwise summation: blocks of up to 128 elements summed on eight accumulators.
PW_BLOCK = 128


@njit(cache=True, nogil=True, inline="always")
def pairwise_block(a, lo, n, zero):
    """numpy's pairwise sum of ``a[lo : lo + n]``, at most :data:`PW_BLOCK` elements, in the
    type of ``zero`` (``np.float32(0)``: a float32 reduction's; ``0.0``: a float32 array
    summed with ``dtype=float64``): one accumulator below 8 elements, else eight, merged in
    pairs, and the remainder added in order."""
    if n < 8:
        res = zero
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = zero + a[lo], zero + a[lo + 1], zero + a[lo + 2], zero + a[lo + 3]
    r4, r5, r6, r7 = zero + a[lo + 4], zero + a[lo + 5], zero + a[lo + 6], zero + a[lo + 7]
    m = n - n % 8
    for i in range(lo + 8, lo + m, 8):
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(lo + m, lo + n):
        res += a[i]
    return res


@njit(cache=True, nogil=True)
def _sum32(a, lo, n, stack):
    """``np.add.reduce`` of the float32 ``a[lo : lo + n]`` over a contiguous axis, bit for bit:
    numpy's pairwise sum in float32 — blocks of up to 128 summed on eight accumulators, longer
    runs split in two at a multiple of 8 and the halves' sums added. The recursion walked with
    an explicit ``stack`` (``(64, 4)`` float64 rows: lo, n, state, the left half's sum): the
    recursive form, loaded back from numba's disk cache, crashed the closed loop's tests."""
    zero = np.float32(0.0)
    if n <= PW_BLOCK:
        return pairwise_block(a, lo, n, zero)
    top = 0
    stack[0, 0], stack[0, 1], stack[0, 2] = lo, n, 0
    res = zero
    while top >= 0:
        at, m, state = int(stack[top, 0]), int(stack[top, 1]), int(stack[top, 2])
        n2 = m // 2
        n2 -= n2 % 8
        if state == 0:  # the left half next
            stack[top, 2] = 1
            if n2 <= PW_BLOCK:
                stack[top, 3] = pairwise_block(a, at, n2, zero)
                stack[top, 2] = 2
            else:
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = at, n2, 0
            continue
        if state == 2:  # the left half summed: the right half next
            stack[top, 2] = 3
            if m - n2 <= PW_BLOCK:
                res = np.float32(stack[top, 3]) + pairwise_block(a, at + n2, m - n2, zero)
            else:
                top += 1
                stack[top, 0], stack[top, 1], stack[top, 2] = at + n2, m - n2, 0
                continue
        # this run is summed (res): hand it to its parent
        top -= 1
        if top >= 0:
            if stack[top, 2] == 1:  # it was the parent's left half
                stack[top, 3] = res
                stack[top, 2] = 2
            else:  # its right half
                res = np.float32(stack[top, 3]) + res
                stack[top, 2] = 3  # the parent is summed too: the loop hands it up
    return res


@njit(cache=True, nogil=True, inline="always")
def _row_times(w, pk, g, j):
    """``sum_h w[g, h] * pk[g, h, j]`` in float32, each product rounded, then added in head
    order: :func:`h2o.model.closed_loop.head_mean`'s arithmetic, which is numpy's elementwise
    multiply and add (correctly rounded on every CPU, unlike a BLAS matmul, whose kernel chooses
    its own order and fused multiply-adds)."""
    acc = np.float32(0.0)
    for h in range(pk.shape[1]):
        acc += w[g, h] * pk[g, h, j]
    return acc


@njit(cache=True, nogil=True)
def steady_rows(p, pos, score, n, t0, i0, windows, rule, mask, pk, w, sig, stack):
    """The model's closed loop in the steady state, rows ``i0..`` of a chunk in one call: for
    each row ``i`` (query ``t0 + i``), every KV head ``g`` (a lane at its budget ``n``) marks
    its kept positions in ``mask[g, i]``, takes the signal the per-row path computes — each
    query head's probabilities ``p[g, h, i]`` at its kept positions, renormalised by their
    float32 pairwise sum, then averaged over the ``gs`` query heads in order (:func:`_row_times`)
    — and steps as
    :func:`step_lanes`. Stops before a row in which some head's kept mass is not positive
    (the careful path's case) and returns the first row not stepped (``p.shape[2]``: all).
    ``pk``, ``w``, ``sig``: scratch ``(G, gs, n)``, ``(G, gs)`` and ``(G, n)`` float32;
    ``stack``: :func:`_sum32`'s."""
    G, gs, c = p.shape[0], p.shape[1], p.shape[2]
    inv = np.float32(1.0 / gs)
    for i in range(i0, c):
        for g in range(G):
            for j in range(n):
                q = pos[g, j]
                for h in range(gs):
                    pk[g, h, j] = p[g, h, i, q]
        for g in range(G):
            for h in range(gs):
                z = _sum32(pk[g, h], 0, n, stack)
                if not z > 0:  # underflowed (or NaN): nothing of this row moved
                    return i
                w[g, h] = inv / z
        for g in range(G):
            for j in range(n):
                sig[g, j] = _row_times(w, pk, g, j)
        for g in range(G):
            ps, s = pos[g], score[g]
            for j in range(n):
                mask[g, i, ps[j]] = True
            call_rule(rule, s[:n], sig[g, :n], n)
            ps[n] = t0 + i
            s[n] = 0.0
            _evict_one(ps, s, n + 1, n + 1 - windows[g])
    return c


def warm() -> None:
    """Compile every loop of this module (the first run after install: a second or two each)
    or load it from the disk cache, for the argument types the library passes
    (:func:`h2o.bank.warm` runs it with the replay's own loop and every built-in rule). A loop
    takes a rule by its address, so this compiles it for every rule."""
    rule = no_score()
    f32, f64 = rule.f32, rule.f64
    pos, score = np.zeros((2, 8), dtype=np.int32), np.zeros((2, 8))
    windows, go, out = (
        np.zeros(2, dtype=np.int64),
        np.ones(2, dtype=np.bool_),
        np.empty(2, np.int64),
    )
    weights = np.full(64, 0.125, dtype=np.float32)
    weights.flags.writeable = False  # a trace's weights are read-only
    victims = np.empty((1, 2), dtype=np.intp)
    replay_steady(weights, 4, 5, pos, score, 3, windows, f32, np.zeros((5, 2)), victims)
    for dtype in (np.float32, np.float64):
        attn = np.full((2, 3), 0.25, dtype=dtype)
        for check in (False, True):
            advance_lanes(pos, score, 3, 5, attn, rule.for_weights(dtype), check, 1.0)
    advance_lanes(pos, score, 3, 5, np.zeros((0, 0)), f64, False, 1.0)
    evict_lanes(pos, score, 4, windows, go, out)
    step_lanes(pos, score, 3, 5, np.full((2, 3), 0.25, dtype=np.float32), f32, windows)
    step_lanes(pos, score, 3, 5, np.zeros((0, 0)), f64, windows)
    p = np.full((2, 3, 4, 8), 0.125, dtype=np.float32)
    gather_kept(p, pos, 3, 0, np.zeros((2, 4, 8), dtype=np.bool_), np.empty((2, 3, 3), np.float32))
    scratch = (np.empty((2, 3, 3), np.float32), np.empty((2, 3), np.float32))
    scratch += (np.empty((2, 3), np.float32), np.empty((64, 4)))
    steady_rows(p, pos, score, 3, 5, 0, windows, f32, np.zeros((2, 4, 8), np.bool_), *scratch)
