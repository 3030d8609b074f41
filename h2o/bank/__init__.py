"""Policy banks: many instances of one policy as one array program, for sweeps and for the model.

A bank holds ``N`` independent lanes of one policy kind — each with its own budget, window or
sinks — as 2-D arrays, and steps them together: one gather, one accumulate, one masked argmin
and one masked shift per step for all ``N``. Its results are exactly those of ``N`` separate
instances: kept positions, victims (ascending), float64 scores bit for bit, and refusals (a
refused step changes no lane). The per-instance classes in :mod:`h2o.policies` stay the
teaching API; banks are the engine behind the sweeps, the budget curves and the model's closed
loop. ::

    specs = [H2O(256, recent_window=w) for w in range(0, 193, 8)]  # built, never stepped
    bank = make_bank(specs)           # 25 lanes: new instances with those parameters
    bank.on_decode_step(0, None)      # every lane; attn: None, an (N, n) block or N rows
    bank.evict()                      # [[], [], ...]: victims per lane, ascending
    bank.lane(3).kept                 # lane 3 as a policy instance, read-only
    replay_bank(make_bank(specs), trace)  # == [replay(p, trace, record=False) for p in specs]
"""

from __future__ import annotations

from collections.abc import Sequence

from h2o.policies import Policy
from h2o.policies.registry import BUILT_IN

from . import kernels, lane
from .base import BankAttn, PolicyBank
from .replay import replay_bank
from .ring import RingBank
from .scored import ScoredBank

#: The classes a bank runs: the library's own that declare one (``Policy.bank``), whose rules it
#: vectorises and whose whole state is in ``params()`` (so it can build its lanes). Anything
#: else — a subclass, a policy loaded from a file — runs one instance at a time.
BANK_KINDS: dict[str, type[PolicyBank]] = {"scored": ScoredBank, "ring": RingBank}
BANKS: dict[type, type[PolicyBank]] = {
    cls: BANK_KINDS[kind] for cls in BUILT_IN if isinstance(kind := cls.declares("bank"), str)
}


def warm() -> None:
    """Compile every loop of the banks and of one replay (the first run after install: a second
    or two each) or load it from numba's disk cache, so the first sweep a server runs does not
    wait for it. ``make setup`` runs it once; the app, in the background, when it starts. The
    loops take a rule by its type, so they serve every rule; each built-in class's rule is
    compiled (or loaded) here too."""
    kernels.warm()
    lane.warm()
    for cls in BUILT_IN:
        compiled_rule = getattr(cls, "compiled_rule", None)
        if compiled_rule is not None:
            compiled_rule()


def bank_class(policy: object) -> type[PolicyBank]:
    """The bank that holds policies like ``policy`` (``ValueError`` if none does)."""
    cls = BANKS.get(type(policy))
    if cls is None:
        raise ValueError(
            f"no bank holds {type(policy).__name__} policies: banks run the library's own "
            f"classes ({', '.join(c.__name__ for c in BANKS)}); step it one instance at a time"
        )
    return cls


def bank_key(policy: object) -> tuple[type[PolicyBank], type | None]:
    """Policies with equal keys can share a bank (a scored bank holds one class; a ring bank
    holds StreamingLLM and the sliding window together)."""
    cls = bank_class(policy)
    return cls, (type(policy) if cls is ScoredBank else None)


def make_bank(policies: Sequence[Policy]) -> PolicyBank:
    """A bank with one lane per fresh instance: its class, parameters and rng (the instances
    themselves are specifications: the bank's lanes are new instances, see ``bank.lane(i)``)."""
    policies = list(policies)
    if not policies:
        raise ValueError("a bank needs at least one policy")
    return bank_class(policies[0])(policies)


__all__ = [
    "BANKS",
    "BankAttn",
    "PolicyBank",
    "RingBank",
    "ScoredBank",
    "bank_class",
    "bank_key",
    "make_bank",
    "replay_bank",
]
