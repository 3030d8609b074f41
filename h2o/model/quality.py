"""Closed-loop quality: the model's perplexity with the cache an eviction policy leaves it.

One policy instance runs in every (layer, KV head) — 30 × 3 = 90 for SmolLM2-135M. Its
attention signal is the mean, over the query heads of its group, of each head's softmax over
the kept keys. The text is run as a masked causal prefill, layer by layer: inside a layer the
queries, keys and values of all tokens are known (they depend only on the previous layer), and
the queries are then stepped in order ``t = 0..T-1``: query ``t`` attends to ``kept ∪ {t}``,
the policy sees that step's weights over ``kept``, admits ``t`` and evicts. This is exactly what
token-by-token decoding with eviction computes under teacher forcing, at prefill speed (see
:meth:`h2o.model.forward.SmolLM._attention`).

A budget ``>= T`` never evicts and reproduces the full-cache numbers bit for bit.

A layer's heads run as one lock-step bank (:mod:`h2o.bank`): the numbers of separate
instances, bit for bit, with one array step per token for all of them.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from h2o.bank import PolicyBank
from h2o.bank.adaptive import AdaptiveLayer
from h2o.model.closed_loop import LayerParts, PolicyFactory, fastest
from h2o.model.forward import SmolLM
from h2o.model.stack import cache_for
from h2o.policies import Policy, make_policy
from h2o.progress import Progress, relabel

FULL_CACHE = "full cache"


@dataclass(frozen=True)
class PerplexityResult:
    """Perplexity of one run, with the per-token negative log-likelihoods behind it."""

    label: str
    perplexity: float
    nll: np.ndarray = field(repr=False)  # (T-1,) float64: -log p(token t+1 | tokens <= t)
    n_tokens: int
    seconds: float

    def as_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "perplexity": self.perplexity,
            "n_tokens": self.n_tokens,
            "seconds": round(self.seconds, 3),
        }


def policy_factory(name: str, budget: int, seed: int = 0, **params: int | None) -> PolicyFactory:
    """A factory building ``POLICIES[name](budget, **params)`` for each (layer, KV head).

    Parameters the policy does not take (e.g. ``sinks`` for H2O) and ``None`` values are
    dropped, so one set of options serves every policy. Every instance gets its own
    ``numpy.random.Generator`` seeded from ``(seed, layer, head)``, so random eviction is
    reproducible and independent across heads.
    """
    make_policy(name, budget, **params)  # fail fast: unknown name, recent_window >= budget, ...

    def make(layer: int, kv_head: int) -> Policy:
        rng = np.random.default_rng([seed, layer, kv_head])
        return make_policy(name, budget, rng=rng, **params)

    return make


def make_policies(model: SmolLM, factory: PolicyFactory) -> list[list[Policy]]:
    """``policies[layer][kv_head]``: one fresh instance per (layer, KV head)."""
    cfg = model.config
    return [[factory(li, g) for g in range(cfg.n_kv_heads)] for li in range(cfg.n_layers)]


def make_banks(
    model: SmolLM, factory: PolicyFactory
) -> list[PolicyBank | LayerParts | AdaptiveLayer | list[Policy]]:
    """Per layer, one bank whose lanes are its KV heads (built from ``factory``'s instances:
    their parameters and generators) — or, where the factory makes something no single bank
    holds (a stand-in, two kinds of policy), that layer's instances (:func:`make_policies`)."""
    return [fastest(row) for row in make_policies(model, factory)]


def perplexity_under_eviction(
    model: SmolLM,
    ids: Sequence[int],
    policy_factory: PolicyFactory | None,
    progress: Progress | None = None,
    label: str | None = None,
    *,
    lock_step: bool = True,
) -> PerplexityResult:
    """Perplexity of ``ids`` when every (layer, KV head) cache is managed by a policy.

    ``policy_factory(layer, kv_head)`` returns a fresh policy; ``None`` means the full cache.
    ``progress(done, total, "layers")`` is called after each of the model's layers. Each layer's
    heads run as one bank (:func:`make_banks`); ``lock_step=False`` steps the instances one by one
    instead (the same numbers, slower: for comparisons).
    """
    ids = [int(i) for i in ids]
    if len(ids) < 2:
        raise ValueError("need at least 2 tokens")
    t_start = time.perf_counter()
    make = make_banks if lock_step else make_policies
    policies = None if policy_factory is None else make(model, policy_factory)
    through = cache_for(model.config, policies=policies)
    hidden = model.forward(ids[:-1], cache=through, progress=progress)
    nll = -model.token_logprobs(hidden, ids[1:])
    return PerplexityResult(
        label=label or (FULL_CACHE if policy_factory is None else "policy"),
        perplexity=float(np.exp(nll.mean())),
        nll=nll,
        n_tokens=len(ids),
        seconds=time.perf_counter() - t_start,
    )


def quality_runs(
    policies: Sequence[str], budgets: Sequence[int], seed: int = 0, **params: int | None
) -> list[tuple[str, PolicyFactory | None]]:
    """``(label, factory)`` of each run of a quality table: the full cache (``None``) first, then
    every policy at every budget, labelled ``"name@budget"``.

    Every factory is built here, so an unknown name or a refused combination (e.g.
    ``recent_window >= budget``) raises ``ValueError`` before anything runs.
    """
    runs: list[tuple[str, PolicyFactory | None]] = [(FULL_CACHE, None)]
    runs += [(f"{p}@{b}", policy_factory(p, b, seed, **params)) for p in policies for b in budgets]
    return runs


def quality_table(
    model: SmolLM,
    ids: Sequence[int],
    policies: Sequence[str],
    budgets: Sequence[int],
    progress: Progress | None = None,
    seed: int = 0,
    **params: int | None,
) -> list[PerplexityResult]:
    """The full-cache run followed by every (policy, budget) run, labelled ``"name@budget"``
    (the runs of :func:`quality_runs`; ``params`` as in :func:`policy_factory`).

    ``progress(done_layers, n_layers, label)`` reports each run: ``done_layers = 0`` as it
    starts, then after each of the model's layers.
    """
    n_layers = model.config.n_layers
    results = []
    for label, factory in quality_runs(policies, budgets, seed, **params):
        cb = None
        if progress is not None:
            progress(0, n_layers, label)
            cb = relabel(progress, label)
        results.append(perplexity_under_eviction(model, ids, factory, cb, label=label))
    return results
