"""Budget allocation and query-aware compression on the real model.

* :func:`head_shares` — per layer and query head, where attention goes on a text: the sinks,
  the recent window, or the rest (one full-cache prefill). DuoAttention's head classes read
  the rest (:meth:`HeadShares.kv_rest`); a page draws the layer x head grid from it.
* :func:`make_allocation` — an :class:`h2o.alloc.Allocation` for the model's shape.
* :func:`allocated_factory` — the policy factory of one (policy, allocation): every (layer, KV
  head) gets its allocated budget (uniform is exactly :func:`h2o.model.quality.policy_factory`,
  so its numbers are unchanged); adaptive steps each layer's heads together; duo runs its
  streaming heads as StreamingLLM.
* :func:`allocation_table` — perplexity of every policy x allocation x budget at equal memory.

The bytes a policy holds under an allocation are a row's (:func:`h2o.model.rows.held_bytes`):
the kinds of cache call this module, so it never imports a row.

SnapKV, which compresses once after the prompt under any of these allocations, is
:mod:`h2o.model.snapkv` (its scoring rule: :mod:`h2o.policies.snapkv`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from h2o.alloc import ALLOCATORS, Allocation, make_allocator
from h2o.alloc.adaptive import adapts
from h2o.alloc.duo import RETRIEVAL
from h2o.bank.adaptive import AdaptiveLayer
from h2o.model.closed_loop import PolicyFactory
from h2o.model.forward import AttnChunk, SmolLM
from h2o.model.quality import (
    FULL_CACHE,
    PerplexityResult,
    perplexity_under_eviction,
    policy_factory,
)
from h2o.policies import StreamingLLM, make_policy
from h2o.policies.snapkv import SNAPKV
from h2o.progress import Progress, relabel

#: Sinks and recent window of the head split (DuoAttention's streaming heads keep these).
N_SINKS, N_RECENT = 4, 32


# -- where each head's attention goes -----------------------------------------------------------
@dataclass(frozen=True)
class HeadShares:
    """Per layer and query head: mean share of attention on the sinks (the first ``n_sinks``
    positions), the recent window (the ``n_recent`` before the query) and the rest, over the
    queries ``t > n_sinks + n_recent``. Arrays ``(n_layers, n_heads)``; each cell sums to 1."""

    sink: np.ndarray
    recent: np.ndarray
    rest: np.ndarray
    n_sinks: int
    n_recent: int
    n_queries: int
    group_size: int

    def kv_rest(self) -> np.ndarray:
        """``(n_layers, n_kv_heads)``: the rest, averaged over each KV head's query heads."""
        L, H = self.rest.shape
        return self.rest.reshape(L, H // self.group_size, self.group_size).mean(axis=2)

    def as_dict(self) -> dict[str, Any]:
        r = 6
        return {
            "n_sinks": self.n_sinks,
            "n_recent": self.n_recent,
            "n_queries": self.n_queries,
            "group_size": self.group_size,
            "sink": np.round(self.sink, r).tolist(),
            "recent": np.round(self.recent, r).tolist(),
            "rest": np.round(self.rest, r).tolist(),
        }


def head_shares(
    model: SmolLM,
    ids: Sequence[int],
    n_sinks: int = N_SINKS,
    n_recent: int = N_RECENT,
    progress: Progress | None = None,
) -> HeadShares:
    """Where every query head of every layer sends its attention on ``ids`` (one prefill).

    Rows are the trace rows (softmax over the previous positions, self dropped), as in
    :func:`h2o.model.layers.region_shares`, per head instead of the mean over heads.
    """
    if n_sinks < 0 or n_recent < 1:
        raise ValueError("n_sinks must be >= 0 and n_recent >= 1")
    ids = [int(i) for i in ids]
    first = n_sinks + n_recent + 1
    if len(ids) <= first:
        raise ValueError(f"need more than {first} tokens, got {len(ids)}")
    cfg = model.config
    sums = np.zeros((3, cfg.n_layers, cfg.n_heads))

    def hook(ch: AttnChunk) -> None:
        t = ch.start + np.arange(ch.rows)
        rows = np.flatnonzero(t >= first)
        if not rows.size:
            return
        pp = ch.prev_probs()[:, rows]  # (H, r, kv)
        t = t[rows]
        cs = np.cumsum(pp, axis=2, dtype=np.float64)
        r = np.arange(rows.size)
        total = cs[:, r, t - 1]
        sink = cs[:, :, n_sinks - 1] if n_sinks else np.zeros_like(total)
        recent = total - cs[:, r, t - n_recent - 1]
        sums[0, ch.layer] += sink.sum(axis=1)
        sums[1, ch.layer] += recent.sum(axis=1)
        sums[2, ch.layer] += (total - sink - recent).sum(axis=1)

    model.forward(ids, attn_hook=hook, progress=progress)
    n = len(ids) - first
    sink, recent, rest = sums / n
    return HeadShares(sink, recent, rest, n_sinks, n_recent, n, cfg.group_size)


# -- allocations on the model -------------------------------------------------------------------
def make_allocation(
    model: SmolLM,
    name: str,
    budget: int,
    shares: np.ndarray | None = None,
    **params: Any,
) -> Allocation:
    """``make_allocator(name, **params).allocate(...)`` for the model's layers and KV heads
    (``shares``: :meth:`HeadShares.kv_rest`, needed by ``duo``)."""
    cfg = model.config
    return make_allocator(name, **params).allocate(
        cfg.n_layers, cfg.n_kv_heads, budget, head_dim=cfg.head_dim, shares=shares
    )


def allocated_factory(
    policy: str, allocation: Allocation, seed: int = 0, **params: int | None
) -> tuple[PolicyFactory, list[str]]:
    """The factory of ``policy`` under ``allocation``, and notes on how it runs.

    Every budget is checked first (a refused one raises ``ValueError`` naming the layer and
    head). Uniform is :func:`policy_factory` itself. Adaptive runs each layer's heads as one
    :class:`h2o.bank.adaptive.AdaptiveLayer` (the factory must be called head 0 first, as
    :func:`h2o.model.quality.make_policies` does); a policy without comparable scores runs
    uniform instead (a note says so). Duo's streaming heads run StreamingLLM with its sinks.
    """
    if policy == SNAPKV:
        raise ValueError(
            "snapkv compresses a prompt once, after reading it: it runs in generate, not in "
            "the closed-loop quality evaluation"
        )
    B = allocation.budget
    notes: list[str] = []
    if allocation.name == "uniform" or (
        allocation.dynamic and not adapts(make_policy(policy, B, **params))
    ):
        if allocation.name != "uniform":
            notes.append(f"{policy} keeps no comparable score: adaptive runs as uniform")
        return policy_factory(policy, B, seed, **params), notes

    budgets = allocation.budgets
    kinds = allocation.kinds
    sinks = allocation.params.get("sinks", 4)

    def build(layer: int, head: int, rng: np.random.Generator | None = None):
        b = int(budgets[layer, head])
        try:
            if kinds is not None and kinds[layer, head] != RETRIEVAL:
                return StreamingLLM(b, sinks=sinks)
            return make_policy(policy, b, rng=rng, **params)
        except ValueError as e:
            raise ValueError(
                f"{policy} under {allocation.name}: layer {layer}, KV head {head} (budget {b}): {e}"
            ) from None

    L, G = allocation.shape
    for li in range(L):
        for g in range(G):
            build(li, g)  # fail fast, naming the head

    if allocation.dynamic:
        layers: dict[int, AdaptiveLayer] = {}
        make_policy(policy, G * B, **params)

        def make_adaptive(layer: int, head: int):
            if head == 0 or layer not in layers:
                inner = [
                    make_policy(
                        policy, G * B, rng=np.random.default_rng([seed, layer, g]), **params
                    )
                    for g in range(G)
                ]
                layers[layer] = AdaptiveLayer(inner, B, allocation.alpha or 0.0)
            return layers[layer].heads[head]

        make_adaptive.layers = layers  # type: ignore[attr-defined]  # the last run's, to read
        return make_adaptive, notes

    def make(layer: int, head: int):
        return build(layer, head, np.random.default_rng([seed, layer, head]))

    return make, notes


@dataclass(frozen=True)
class AllocationRun:
    """One row of an allocation table: a policy under an allocation at a budget."""

    policy: str
    allocation: Allocation
    factory: PolicyFactory = field(repr=False)
    notes: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.policy}/{self.allocation.name}@{self.allocation.budget}"


def allocation_runs(
    model: SmolLM,
    policies: Sequence[str],
    budgets: Sequence[int],
    allocations: Sequence[str],
    shares: np.ndarray | None = None,
    seed: int = 0,
    alloc_params: dict[str, Any] | None = None,
    **params: int | None,
) -> list[AllocationRun]:
    """Every (policy, allocation, budget), built and checked before anything runs."""
    runs = []
    for p in policies:
        for a in allocations:
            for b in budgets:
                alloc = make_allocation(model, a, b, shares, **(alloc_params or {}))
                f, notes = allocated_factory(p, alloc, seed, **params)
                runs.append(AllocationRun(p, alloc, f, tuple(notes)))
    return runs


def check_allocations(allocations: Sequence[str], **alloc_params: Any) -> None:
    """Refuse unknown names and bad allocator parameters (before any model is loaded)."""
    if not allocations:
        raise ValueError("--allocation is empty")
    for a in allocations:
        if a not in ALLOCATORS:
            raise ValueError(f"unknown allocation {a!r}; choose from {', '.join(ALLOCATORS)}")
        make_allocator(a, **alloc_params)


def allocation_table(
    model: SmolLM,
    ids: Sequence[int],
    runs: Sequence[AllocationRun],
    progress: Progress | None = None,
) -> tuple[PerplexityResult, list[PerplexityResult]]:
    """The full-cache run and each run's perplexity (same order as ``runs``)."""
    n_layers = model.config.n_layers

    def cb(label: str) -> Progress | None:
        if progress is None:
            return None
        progress(0, n_layers, label)
        return relabel(progress, label)

    full = perplexity_under_eviction(model, ids, None, cb(FULL_CACHE), label=FULL_CACHE)
    out = [perplexity_under_eviction(model, ids, r.factory, cb(r.label), r.label) for r in runs]
    return full, out
