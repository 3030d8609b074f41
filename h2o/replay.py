"""Replay a policy over a trace and measure what its cache keeps.

:func:`replay` runs the card's loop (:func:`~h2o.stepwise.replay_stepwise`: at each step the
policy sees the attention on what it keeps, admits the step, evicts back to budget) by the fastest
engine that gives its numbers: the library's classes in one compiled call (:mod:`h2o.bank.lane`),
Quest's selection of what each step reads (:mod:`h2o.replay_selection`), any other policy one Python
step at a time. What a replay measured is a :class:`~h2o.replay_outcome.Replay`.
"""

from __future__ import annotations

from .bank.lane import replay_compiled
from .policies import Policy
from .replay_outcome import EVICTS_BY, Replay, check_top_k, result
from .replay_selection import replay_selection
from .stepwise import replay_stepwise
from .trace import Trace

__all__ = ["EVICTS_BY", "Replay", "check_top_k", "replay", "replay_stepwise", "result"]


def replay(policy: Policy, trace: Trace, top_k: int = 32, *, record: bool = True) -> Replay:
    """Run ``policy`` (fresh, nothing admitted yet) over every step of ``trace``.

    ``record=False`` skips the per-step score snapshots (metrics and victims only) for sweeps.
    """
    if len(policy) or policy.last_pos >= 0:
        raise ValueError("replay needs a fresh policy (this one has already taken steps)")
    if policy.selects:  # it reads a part of a whole cache each step (Quest)
        return replay_selection(policy, trace, top_k, record=record)
    top_k = check_top_k(top_k)
    policy.observe(trace)  # what it reads beyond attention (K-norm: the key norms)
    compiled = replay_compiled(policy, trace, top_k, record)
    if compiled is not None:  # the library's own classes: every step in one compiled call
        return compiled
    return replay_stepwise(policy, trace, top_k, record=record)
