"""The replay loop one Python step at a time, through the policy's own methods.

At each step ``t`` the policy sees ``row(t)`` restricted to its kept positions and renormalised
over them — exactly what a softmax over the kept keys gives — then ``on_decode_step(t, ...)``
admits ``t``, then ``evict()`` brings the cache back to budget. What it measured is a
:class:`~h2o.replay_outcome.Replay`.
"""

from __future__ import annotations

import numpy as np

from .policies import Policy
from .replay_outcome import Replay, check_top_k, result
from .trace import Trace


def replay_stepwise(
    policy: Policy, trace: Trace, top_k: int = 32, *, record: bool = True
) -> Replay:
    """:func:`h2o.replay.replay` one Python step at a time, through the policy's own methods:
    any policy (random eviction, a subclass, your own), and the reference the compiled replay
    of the library's classes (:mod:`h2o.bank.lane`) is tested against, bit for bit."""
    if len(policy) or policy.last_pos >= 0:
        raise ValueError("replay needs a fresh policy (this one has already taken steps)")
    top_k = check_top_k(top_k)
    policy.observe(trace)
    steps, budget = trace.steps, policy.budget
    mass = np.ones(steps)
    n_kept = np.zeros(steps, dtype=np.int32)
    # Slots per recorded step: budget + 1 at most (admitted, not yet evicted), and never more
    # than the trace has positions — so a huge budget on a short trace costs nothing.
    cap = min(budget + 1, steps)
    if record:
        kept_pos = np.full((steps, cap), -1, dtype=np.int32)
        kept_score = np.full((steps, cap), np.nan)
    v_step: list[int] = []
    v_pos: list[int] = []
    f64, f32, total = np.float64, np.float32, np.add.reduce
    advance = policy.advance_trusted  # trusted: see Policy.advance_trusted
    weights = trace.weights  # rows packed back to back: row t starts at t(t-1)/2
    for t in range(steps):
        o = t * (t - 1) // 2
        kept = policy.kept
        w = weights[o : o + t][kept]
        m = total(w, dtype=f64)
        if t:
            mass[t] = m
        advance(t, w / f32(m) if m > 0 else w)
        n = len(policy)
        n_kept[t] = n
        if record:
            if n > cap:
                raise ValueError("policy kept more than budget + 1 positions before evicting")
            # Admitting only appends t (the contract), so the kept set after the step is the
            # one before it plus t: no second read of policy.kept (a copy, for StreamingLLM).
            kept_pos[t, : n - 1] = kept
            kept_pos[t, n - 1] = t
            kept_score[t, :n] = policy.scores
        victims = policy.evict()
        for v in victims:
            v_step.append(t)
            v_pos.append(v)
    victim_step = np.asarray(v_step, dtype=np.int32)
    victim_pos = np.asarray(v_pos, dtype=np.int32)
    if record and v_pos:  # a victim's score is the one recorded at the step it went
        idx = (kept_pos[victim_step] == victim_pos[:, None]).argmax(axis=1)
        victim_score = kept_score[victim_step, idx]
    else:
        victim_score = np.full(len(v_pos), np.nan)
    recorded = (kept_pos, kept_score) if record else (None, None)
    return result(
        policy,
        trace,
        top_k,
        mass,
        n_kept,
        victim_step,
        victim_pos,
        victim_score,
        *recorded,
    )
