"""Replaying a selection: a method that holds every position and chooses what each step reads
(Quest, :mod:`h2o.policies.quest`), in the same :class:`~h2o.replay.Replay` the player and the
tables read — with "kept at step t" meaning *read* at step t.

A step's retained mass is the attention its query pays the keys it reads and its recall the share
of the row's top ``k`` among them; nothing is evicted (no victims). A position read at one step
may be skipped at the next and read again after: the heatmap shows it come and go.
"""

from __future__ import annotations

import numpy as np

from .policies.base import Policy
from .replay_outcome import Replay, check_top_k, result
from .trace import Trace


def replay_selection(
    policy: Policy, trace: Trace, top_k: int = 32, *, record: bool = True
) -> Replay:
    """Step ``policy`` (a class with ``selects``: its ``read(pos)`` gives the positions the query
    at ``pos`` reads and their scores, ``most_read(steps)`` the most any step reads) over every
    step of ``trace``."""
    if not getattr(policy, "selects", False):
        raise ValueError(f"{policy.label} evicts: replay it with h2o.replay")
    top_k = check_top_k(top_k)
    policy.observe(trace)
    steps = trace.steps
    mass, recall = np.ones(steps), np.ones(steps)
    n_read = np.zeros(steps, dtype=np.int32)
    read = policy.read  # type: ignore[attr-defined]
    if record:
        cap = max(1, policy.most_read(steps))  # type: ignore[attr-defined]
        kept_pos = np.full((steps, cap), -1, dtype=np.int32)
        kept_score = np.full((steps, cap), np.nan)
    topk = trace.top_k(top_k)
    for t in range(steps):
        pos, score = read(t)
        n_read[t] = len(pos)
        if t:
            mass[t] = float(trace.row(t)[pos].sum(dtype=np.float64))
            want = topk[t][topk[t] >= 0]
            recall[t] = np.isin(want, pos).mean() if want.size else 1.0
        if record:
            kept_pos[t, : len(pos)], kept_score[t, : len(pos)] = pos, score
        policy.advance_trusted(t, None)  # it holds t from now on
    none = np.zeros(0, dtype=np.int32)
    snapshots = (kept_pos, kept_score) if record else (None, None)
    out = result(policy, trace, top_k, mass, n_read, none, none, None, *snapshots, recall)
    out.extra["selects"] = True  # "kept" is what a step reads: the narration and player say so
    return out
